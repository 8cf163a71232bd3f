package envoysim

import (
	"errors"
	"fmt"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/ilbproject/ilb/envoy"
)

// LoadBootstrap reads an Envoy bootstrap YAML file strictly
// ([envoy.LoadYAML]: unknown fields and protoc-gen-validate violations are
// errors) and checks that envoysim supports every field it uses, reporting
// every problem.
func LoadBootstrap(path string) (*bootstrapv3.Bootstrap, error) {
	var b bootstrapv3.Bootstrap
	if err := envoy.LoadYAML(path, &b); err != nil {
		return nil, fmt.Errorf("load bootstrap: %w", err)
	}
	if _, err := compileBootstrap(&b, newFieldPolicy()); err != nil {
		return nil, fmt.Errorf("bootstrap %s: %w", path, err)
	}
	return &b, nil
}

// adsConfig is the aggregated discovery service client configuration.
type adsConfig struct {
	clusterName      string
	cds              bool // cds_config is ads
	lds              bool // lds_config is ads
	nodeEveryRequest bool // !set_node_on_first_message_only
	delta            bool // api_type DELTA_GRPC
	// retryBase and retryMax bound the reconnection back-off
	// (envoy_grpc.retry_policy.retry_back_off; 500 ms and 30 s by default,
	// a max of ten times the base when only the base is set).
	retryBase, retryMax time.Duration
	initialMetadata     []headerValue
}

// compiledBootstrap is a checked bootstrap.
type compiledBootstrap struct {
	clusters  map[string]*clusterConfig
	listeners map[string]*listenerConfig
	ads       *adsConfig // nil without dynamic resources
}

// compileBootstrap checks b: protoc-gen-validate rules, the field policy,
// and the semantics of every static resource and of the ADS configuration.
func compileBootstrap(b *bootstrapv3.Bootstrap, policy fieldPolicy) (*compiledBootstrap, error) {
	// Semantic checks assume valid, supported input: report every
	// validation and policy problem first.
	if err := errors.Join(envoy.Validate(b), policy.check(b, "bootstrap")); err != nil {
		return nil, err
	}
	cb := &compiledBootstrap{clusters: map[string]*clusterConfig{}, listeners: map[string]*listenerConfig{}}
	var errs []error
	for i, c := range b.GetStaticResources().GetClusters() {
		if _, dup := cb.clusters[c.GetName()]; dup {
			errs = append(errs, fmt.Errorf("static_resources.clusters[%d]: duplicate cluster %q", i, c.GetName()))
			continue
		}
		cc, err := compileCluster(c)
		if err != nil {
			errs = append(errs, fmt.Errorf("static_resources.clusters[%d] %q: %w", i, c.GetName(), err))
			continue
		}
		cb.clusters[c.GetName()] = cc
	}
	exists := func(name string) bool { _, ok := cb.clusters[name]; return ok }
	for i, l := range b.GetStaticResources().GetListeners() {
		if _, dup := cb.listeners[l.GetName()]; dup {
			errs = append(errs, fmt.Errorf("static_resources.listeners[%d]: duplicate listener %q", i, l.GetName()))
			continue
		}
		lc, err := compileListener(l, exists)
		if err != nil {
			errs = append(errs, fmt.Errorf("static_resources.listeners[%d] %q: %w", i, l.GetName(), err))
			continue
		}
		cb.listeners[l.GetName()] = lc
	}
	if dr := b.GetDynamicResources(); dr != nil {
		ads, err := compileADS(b, cb.clusters)
		if err != nil {
			errs = append(errs, fmt.Errorf("dynamic_resources: %w", err))
		}
		cb.ads = ads
	}
	return cb, errors.Join(errs...)
}

func compileADS(b *bootstrapv3.Bootstrap, clusters map[string]*clusterConfig) (*adsConfig, error) {
	dr := b.GetDynamicResources()
	var errs []error
	if b.GetNode().GetId() == "" || b.GetNode().GetCluster() == "" {
		errs = append(errs, errors.New("node.id and node.cluster are required with dynamic resources"))
	}
	src := dr.GetAdsConfig()
	if src == nil {
		return nil, errors.Join(append(errs, errors.New("ads_config is required: envoysim only supports aggregated xDS"))...)
	}
	ads := &adsConfig{nodeEveryRequest: !src.GetSetNodeOnFirstMessageOnly(), retryBase: adsRetryInitial, retryMax: adsRetryMax}
	switch src.GetApiType() {
	case corev3.ApiConfigSource_GRPC:
	case corev3.ApiConfigSource_DELTA_GRPC:
		ads.delta = true
	default:
		errs = append(errs, fmt.Errorf("ads_config.api_type %s is not supported (GRPC or DELTA_GRPC)", src.GetApiType()))
	}
	if src.GetTransportApiVersion() != corev3.ApiVersion_V3 {
		errs = append(errs, errors.New("ads_config.transport_api_version must be V3"))
	}
	if len(src.GetGrpcServices()) != 1 {
		errs = append(errs, fmt.Errorf("ads_config.grpc_services: exactly one is supported, got %d", len(src.GetGrpcServices())))
	} else {
		gs := src.GetGrpcServices()[0]
		ads.clusterName = gs.GetEnvoyGrpc().GetClusterName()
		if b := gs.GetEnvoyGrpc().GetRetryPolicy().GetRetryBackOff(); b != nil {
			ads.retryBase, ads.retryMax = b.GetBaseInterval().AsDuration(), 10*b.GetBaseInterval().AsDuration()
			if b.GetMaxInterval() != nil {
				ads.retryMax = b.GetMaxInterval().AsDuration()
			}
		}
		for _, hv := range gs.GetInitialMetadata() {
			ads.initialMetadata = append(ads.initialMetadata, headerValue{key: hv.GetKey(), value: hv.GetValue()})
		}
		cc := clusters[ads.clusterName]
		switch {
		case ads.clusterName == "":
			errs = append(errs, errors.New("ads_config.grpc_services[0].envoy_grpc.cluster_name is required"))
		case cc == nil:
			errs = append(errs, fmt.Errorf("ads_config: unknown gRPC client cluster '%s' (it must be a static cluster)", ads.clusterName))
		case cc.kind != kindStatic && cc.kind != kindStrictDNS:
			errs = append(errs, fmt.Errorf("ads_config: cluster '%s' must be STATIC or STRICT_DNS", ads.clusterName))
		case len(cc.endpointList()) == 0:
			errs = append(errs, fmt.Errorf("ads_config: cluster '%s' has no load_assignment endpoints", ads.clusterName))
		case !cc.http2:
			errs = append(errs, fmt.Errorf("ads_config: cluster '%s' must configure HTTP/2 (gRPC)", ads.clusterName))
		}
	}
	for _, c := range []struct {
		name string
		cs   *corev3.ConfigSource
		set  *bool
	}{{"cds_config", dr.GetCdsConfig(), &ads.cds}, {"lds_config", dr.GetLdsConfig(), &ads.lds}} {
		if c.cs == nil {
			continue
		}
		if c.cs.GetAds() == nil {
			errs = append(errs, fmt.Errorf("%s: only ads: {} is supported by envoysim", c.name))
			continue
		}
		if v := c.cs.GetResourceApiVersion(); v != corev3.ApiVersion_V3 && v != corev3.ApiVersion_AUTO {
			errs = append(errs, fmt.Errorf("%s.resource_api_version must be V3", c.name))
		}
		*c.set = true
	}
	return ads, errors.Join(errs...)
}
