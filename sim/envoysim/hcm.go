package envoysim

import (
	"errors"
	"fmt"
	"strings"
	"time"

	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	earlyheadermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/http/early_header_mutation/header_mutation/v3"
)

// defaultStreamIdleTimeout is HttpConnectionManager.stream_idle_timeout when
// unset.
const defaultStreamIdleTimeout = 5 * time.Minute

// codecKind is the downstream codec.
type codecKind int

const (
	codecAuto codecKind = iota
	codecHTTP1
	codecHTTP2
)

// hcmConfig is a compiled HttpConnectionManager.
type hcmConfig struct {
	codec                        codecKind
	rdsName                      string
	inline                       *routeTable
	filters                      []httpFilterConfig
	suppressEnvoyHeaders         bool
	generateRequestID            bool
	early                        []earlyMutation
	streamIdleTimeout            time.Duration // 0 disables
	useRemoteAddress             bool
	skipXffAppend                bool
	xffTrustedHops               uint32
	via                          string
	preserveExternalRequestID    bool
	alwaysSetRequestIDInResponse bool
	serverName                   string
	serverTransform              hcmv3.HttpConnectionManager_ServerHeaderTransformation
	stripMatchingHostPort        bool
	stripAnyHostPort             bool
	stripTrailingHostDot         bool
	forwardClientCert            hcmv3.HttpConnectionManager_ForwardClientCertDetails
	localReply                   []localReplyMapper
	paths                        pathNormalization // path_normalize.go
}

func compileHCM(c *hcmv3.HttpConnectionManager, clusterExists func(string) bool) (*hcmConfig, error) {
	h := &hcmConfig{
		generateRequestID:            c.GetGenerateRequestId() == nil || c.GetGenerateRequestId().GetValue(),
		streamIdleTimeout:            defaultStreamIdleTimeout,
		useRemoteAddress:             c.GetUseRemoteAddress().GetValue(),
		skipXffAppend:                c.GetSkipXffAppend(),
		xffTrustedHops:               c.GetXffNumTrustedHops(),
		via:                          c.GetVia(),
		preserveExternalRequestID:    c.GetPreserveExternalRequestId(),
		alwaysSetRequestIDInResponse: c.GetAlwaysSetRequestIdInResponse(),
		serverName:                   c.GetServerName(),
		serverTransform:              c.GetServerHeaderTransformation(),
		stripMatchingHostPort:        c.GetStripMatchingHostPort(),
		stripAnyHostPort:             c.GetStripAnyHostPort(),
		stripTrailingHostDot:         c.GetStripTrailingHostDot(),
		forwardClientCert:            c.GetForwardClientCertDetails(),
	}
	if h.serverName == "" {
		h.serverName = "envoy"
	}
	var errs []error
	switch c.GetCodecType() {
	case hcmv3.HttpConnectionManager_AUTO:
		h.codec = codecAuto
	case hcmv3.HttpConnectionManager_HTTP1:
		h.codec = codecHTTP1
	case hcmv3.HttpConnectionManager_HTTP2:
		h.codec = codecHTTP2
	default:
		errs = append(errs, fmt.Errorf("codec_type %s is not supported by envoysim", c.GetCodecType()))
	}
	if c.GetStreamIdleTimeout() != nil {
		h.streamIdleTimeout = c.GetStreamIdleTimeout().AsDuration()
	}
	lr, err := compileLocalReply(c.GetLocalReplyConfig())
	if err != nil {
		errs = append(errs, err)
	}
	h.localReply = lr
	if c.GetRequestTimeout().AsDuration() != 0 {
		errs = append(errs, errors.New("request_timeout: only 0s (disabled, the default) is supported by envoysim"))
	}
	if h.paths, err = compilePathNormalization(c); err != nil {
		errs = append(errs, err)
	}
	switch rs := c.GetRouteSpecifier().(type) {
	case *hcmv3.HttpConnectionManager_Rds:
		if rs.Rds.GetConfigSource().GetAds() == nil {
			errs = append(errs, errors.New("rds.config_source: only ads is supported by envoysim"))
		}
		h.rdsName = rs.Rds.GetRouteConfigName()
	case *hcmv3.HttpConnectionManager_RouteConfig:
		t, err := compileRouteTable(rs.RouteConfig, clusterExists, true)
		if err != nil {
			errs = append(errs, fmt.Errorf("route_config: %w", err))
		}
		h.inline = t
	default:
		errs = append(errs, errors.New("rds or route_config is required"))
	}
	errs = append(errs, h.compileFilters(c.GetHttpFilters())...)
	for i, ext := range c.GetEarlyHeaderMutationExtensions() {
		var hm earlyheadermutationv3.HeaderMutation
		if err := ext.GetTypedConfig().UnmarshalTo(&hm); err != nil {
			errs = append(errs, fmt.Errorf("early_header_mutation_extensions[%d]: only %s is supported: %w", i, "envoy.http.early_header_mutation.header_mutation", err))
			continue
		}
		for j, m := range hm.GetMutations() {
			em, err := compileEarlyMutation(m)
			if err != nil {
				errs = append(errs, fmt.Errorf("early_header_mutation_extensions[%d].mutations[%d]: %w", i, j, err))
				continue
			}
			h.early = append(h.early, em)
		}
	}
	return h, errors.Join(errs...)
}

// compileFilters accepts ext_proc and header_mutation filters followed by
// the terminal router; an empty list means the router alone.
func (h *hcmConfig) compileFilters(filters []*hcmv3.HttpFilter) []error {
	var errs []error
	sawRouter := false
	for i, f := range filters {
		if sawRouter {
			errs = append(errs, fmt.Errorf("http_filters[%d] %q: the router filter must be the last filter", i, f.GetName()))
			continue
		}
		if f.GetTypedConfig() == nil {
			errs = append(errs, fmt.Errorf("http_filters[%d] %q: typed_config is required by envoysim", i, f.GetName()))
			continue
		}
		msg, err := f.GetTypedConfig().UnmarshalNew()
		if err != nil {
			errs = append(errs, fmt.Errorf("http_filters[%d] %q: %w", i, f.GetName(), err))
			continue
		}
		switch cfg := msg.(type) {
		case *extprocfilterv3.ExternalProcessor:
			ep, err := compileExtProc(f.GetName(), cfg)
			if err != nil {
				errs = append(errs, fmt.Errorf("http_filters[%d] %q: %w", i, f.GetName(), err))
				continue
			}
			h.filters = append(h.filters, ep)
		case *headermutationv3.HeaderMutation:
			hm, err := compileHeaderMutation(cfg)
			if err != nil {
				errs = append(errs, fmt.Errorf("http_filters[%d] %q: %w", i, f.GetName(), err))
				continue
			}
			h.filters = append(h.filters, hm)
		case *routerv3.Router:
			sawRouter = true
			h.suppressEnvoyHeaders = cfg.GetSuppressEnvoyHeaders()
		default:
			errs = append(errs, fmt.Errorf("http_filters[%d] %q: filter type %T is not supported by envoysim (only ext_proc, header_mutation and router)", i, f.GetName(), msg))
		}
	}
	if len(filters) > 0 && !sawRouter && len(errs) == 0 {
		errs = append(errs, errors.New("http_filters: the last filter must be the terminal router filter"))
	}
	return errs
}

// earlyMutation is one compiled mutation of the early header mutation
// extension (source/common/http/header_mutation.cc): remove a header,
// remove every header whose name matches, or append a HeaderValueOption.
type earlyMutation struct {
	remove        string
	removeMatcher *stringMatcher
	add           *headerToAdd
}

func compileEarlyMutation(m *mutationrulesv3.HeaderMutation) (earlyMutation, error) {
	switch a := m.GetAction().(type) {
	case *mutationrulesv3.HeaderMutation_Remove:
		return earlyMutation{remove: strings.ToLower(a.Remove)}, nil
	case *mutationrulesv3.HeaderMutation_RemoveOnMatch_:
		sm, err := compileStringMatcher(a.RemoveOnMatch.GetKeyMatcher())
		if err != nil {
			return earlyMutation{}, fmt.Errorf("remove_on_match: %w", err)
		}
		return earlyMutation{removeMatcher: sm}, nil
	case *mutationrulesv3.HeaderMutation_Append:
		p, err := compileHeaderParser([]*corev3.HeaderValueOption{a.Append}, nil)
		if err != nil {
			return earlyMutation{}, fmt.Errorf("append: %w", err)
		}
		return earlyMutation{add: &p.add[0]}, nil
	default:
		return earlyMutation{}, errors.New("an action (remove, append, remove_on_match) is required")
	}
}

// apply runs the mutation on the request headers.
func (m earlyMutation) apply(h *headerMap) {
	m.applyTo(h, formatContext{req: h})
}

// applyTo runs the mutation on h, formatting appended values with fc
// (Http::HeaderMutations::evaluateHeaders).
func (m earlyMutation) applyTo(h *headerMap, fc formatContext) {
	switch {
	case m.remove != "":
		h.remove(m.remove)
	case m.removeMatcher != nil:
		h.removeIf(m.removeMatcher.match)
	case m.add != nil:
		(&headerParser{add: []headerToAdd{*m.add}}).evaluate(h, fc)
	}
}
