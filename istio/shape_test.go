package istio

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/api/networking/v1"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	"sigs.k8s.io/yaml"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/envoy"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/weights"
	"github.com/ilbproject/ilb/xds"
)

// document is one rendered YAML document, decoded strictly.
type document struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   Metadata        `json:"metadata"`
	Spec       json.RawMessage `json:"spec"`
	spec       proto.Message
}

// decodeAll splits Render's output into documents and decodes each
// strictly: the envelope into document, the spec into the istio.io/api
// message of its kind (protojson, unknown fields are errors).
func decodeAll(t *testing.T, out []byte) []document {
	t.Helper()
	var docs []document
	for i, raw := range bytes.Split(out, []byte("\n---\n")) {
		js, err := yaml.YAMLToJSON(raw)
		if err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.DisallowUnknownFields()
		var d document
		if err := dec.Decode(&d); err != nil {
			t.Fatalf("document %d: %v\n%s", i, err, raw)
		}
		want := map[string]struct {
			apiVersion string
			spec       proto.Message
		}{
			KindVirtualService:  {NetworkingV1, &networkingv1.VirtualService{}},
			KindDestinationRule: {NetworkingV1, &networkingv1.DestinationRule{}},
			KindEnvoyFilter:     {NetworkingV1alpha3, &networkingv1alpha3.EnvoyFilter{}},
		}[d.Kind]
		if want.spec == nil || d.APIVersion != want.apiVersion {
			t.Fatalf("document %d: apiVersion %q, kind %q", i, d.APIVersion, d.Kind)
		}
		if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(d.Spec, want.spec); err != nil {
			t.Fatalf("document %d (%s %s): spec: %v", i, d.Kind, d.Metadata.Name, err)
		}
		d.spec = want.spec
		md := d.Metadata
		if !validSubdomain(md.Name) || !strings.HasPrefix(md.Name, "ilb-") || !validLabel(md.Namespace) || md.Labels[managedByLabel] != managedBy {
			t.Errorf("document %d (%s): metadata %+v", i, d.Kind, md)
		}
		docs = append(docs, d)
	}
	return docs
}

// TestShape decodes every rendered document strictly into Istio's protos
// and every EnvoyFilter patch value into the Envoy proto it stands for,
// applies each patch as istiod would (MERGE = proto.Merge, Any with Any)
// to the corresponding part of ILB's own listener, and checks the result
// with ValidateAll, and that the settings equal ILB's own (package xds).
func TestShape(t *testing.T) {
	c := loadConfig(t, exampleConfig)
	w := demandWeights(t, c)
	for _, ex := range examples {
		t.Run(ex.file, func(t *testing.T) {
			out, err := Render(c, w, ex.opts)
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[string]int{}
			for _, d := range decodeAll(t, out) {
				kinds[d.Kind]++
				if ef, ok := d.spec.(*networkingv1alpha3.EnvoyFilter); ok {
					checkEnvoyFilter(t, c, w, ex.opts.Sources[0], "outbound|18001||"+DefaultExtProcHost, ef)
				}
			}
			if kinds[KindVirtualService] != 1 || kinds[KindEnvoyFilter] != 1 || kinds[KindDestinationRule] == 0 {
				t.Errorf("kinds %v", kinds)
			}
		})
	}
}

// ilbHCM returns the HTTP connection manager of ILB's own listener for
// the source, with its HTTP filters by name.
func ilbHCM(t *testing.T, c *config.Config, w *weights.Weights, source string) (*listenerv3.Listener, *hcmv3.HttpConnectionManager, map[string]*hcmv3.HttpFilter) {
	t.Helper()
	res, err := xds.Build(c, w, nil, source)
	if err != nil {
		t.Fatal(err)
	}
	l := res.Listeners[0]
	hcm := &hcmv3.HttpConnectionManager{}
	if err := l.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(hcm); err != nil {
		t.Fatal(err)
	}
	filters := map[string]*hcmv3.HttpFilter{}
	for _, f := range hcm.GetHttpFilters() {
		filters[f.GetName()] = f
	}
	return l, hcm, filters
}

func checkEnvoyFilter(t *testing.T, c *config.Config, w *weights.Weights, source, extProcCluster string, ef *networkingv1alpha3.EnvoyFilter) {
	t.Helper()
	ilbListener, ilbHCMConfig, ilbFilters := ilbHCM(t, c, w, source)
	seen := map[string]bool{}
	var ilbMode *extprocfilterv3.ProcessingMode // ILB's ext_proc's processing mode, turned on per route
	for i, p := range ef.GetConfigPatches() {
		name := fmt.Sprintf("patch %d (%s %s)", i, p.GetApplyTo(), p.GetPatch().GetOperation())
		value := p.GetPatch().GetValue()
		switch p.GetApplyTo() {
		case networkingv1alpha3.EnvoyFilter_LISTENER:
			l := decodeValue(t, name, value, &listenerv3.Listener{})
			merged := mergeInto(t, ilbListener, l)
			if merged.GetPerConnectionBufferLimitBytes().GetValue() != ilbListener.GetPerConnectionBufferLimitBytes().GetValue() {
				t.Errorf("%s: buffer limit %v, ILB's listener has %v", name, l.GetPerConnectionBufferLimitBytes(), ilbListener.GetPerConnectionBufferLimitBytes())
			}
		case networkingv1alpha3.EnvoyFilter_NETWORK_FILTER:
			f := decodeValue(t, name, value, &listenerv3.Filter{})
			patch := decodeTypedConfig(t, name, value, &hcmv3.HttpConnectionManager{}).(*hcmv3.HttpConnectionManager)
			// A part of a connection manager: istiod merges it (Any with
			// Any) into the proxy's; ILB's own stands for that one.
			base := proto.Clone(ilbHCMConfig).(*hcmv3.HttpConnectionManager)
			base.EarlyHeaderMutationExtensions, base.AlwaysSetRequestIdInResponse, base.LocalReplyConfig = nil, false, nil
			// The path settings as istiod sets them for
			// meshConfig.pathNormalization NONE: the merge must set all three.
			base.NormalizePath, base.MergeSlashes = wrapperspb.Bool(false), false
			base.PathWithEscapedSlashesAction = hcmv3.HttpConnectionManager_KEEP_UNCHANGED
			proto.Merge(base, patch)
			validate(t, name, &listenerv3.Filter{Name: f.GetName(), ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: envoy.MustAny(base)}})
			if !proto.Equal(base, ilbHCMConfig) {
				t.Errorf("%s: the merged HTTP connection manager differs from ILB's:\n%v\n%v", name, base, ilbHCMConfig)
			}
		case networkingv1alpha3.EnvoyFilter_HTTP_FILTER:
			f := decodeValue(t, name, value, &hcmv3.HttpFilter{})
			validate(t, name, f)
			want, ok := ilbFilters[f.GetName()]
			if !ok {
				t.Errorf("%s: ILB's listener has no filter %s", name, f.GetName())
				continue
			}
			wantTyped, err := want.GetTypedConfig().UnmarshalNew()
			if err != nil {
				t.Fatal(err)
			}
			typed := decodeTypedConfig(t, name, value, wantTyped.ProtoReflect().New().Interface())
			validate(t, name, typed)
			if ep, ok := typed.(*extprocfilterv3.ExternalProcessor); ok {
				g := ep.GetGrpcService()
				if got := g.GetEnvoyGrpc().GetClusterName(); got != extProcCluster {
					t.Errorf("%s: ext_proc cluster %q, want %q", name, got, extProcCluster)
				}
				if md := g.GetInitialMetadata(); len(md) != 1 || md[0].GetKey() != header.Source || md[0].GetValue() != source {
					t.Errorf("%s: initial metadata %v, want %s: %s", name, md, header.Source, source)
				}
				g.GetEnvoyGrpc().ClusterName = c.Envoy.ExtProcCluster // ILB's own bootstrap cluster
				if !proto.Equal(ep.GetProcessingMode(), processingOff()) {
					t.Errorf("%s: ext_proc's listener mode %v, want every mode off (ILB's routes turn it on)", name, ep.GetProcessingMode())
				}
				var own extprocfilterv3.ExternalProcessor
				if err := want.GetTypedConfig().UnmarshalTo(&own); err != nil {
					t.Fatal(err)
				}
				ilbMode, ep.ProcessingMode = own.GetProcessingMode(), own.GetProcessingMode()
			}
			if !proto.Equal(typed, wantTyped) {
				t.Errorf("%s: %s differs from ILB's:\n%v\n%v", name, f.GetName(), typed, wantTyped)
			}
			seen[f.GetName()] = true
		case networkingv1alpha3.EnvoyFilter_CLUSTER:
			cl := decodeValue(t, name, value, &clusterv3.Cluster{})
			if svc := p.GetMatch().GetCluster().GetService(); svc != "" { // replica picking on an engine service
				picking := false
				for _, e := range c.Clusters {
					picking = picking || e.ReplicaPicking.Enabled && e.Service != nil && e.Service.Host == svc
				}
				want := &clusterv3.Cluster{LbPolicy: clusterv3.Cluster_CLUSTER_PROVIDED, LoadBalancingPolicy: envoy.OverrideHostPolicy(c.Envoy.SlowStart.Std())}
				if !picking || p.GetPatch().GetOperation() != networkingv1alpha3.EnvoyFilter_Patch_MERGE || !proto.Equal(cl, want) {
					t.Errorf("%s: CLUSTER patch of %s (replica picking %v): %v, want a MERGE of the override_host policy", name, svc, picking, cl)
				}
				continue
			}
			validate(t, name, cl)
			if cl.GetName() != extProcCluster || p.GetPatch().GetOperation() != networkingv1alpha3.EnvoyFilter_Patch_ADD {
				t.Errorf("%s: cluster %q; want ext_proc's %q added", name, cl.GetName(), extProcCluster)
			}
			checkTLSCluster(t, name, cl)
		case networkingv1alpha3.EnvoyFilter_HTTP_ROUTE:
			r := decodeValue(t, name, value, &routev3.Route{})
			if pf, ok := r.GetTypedPerFilterConfig()[envoy.ExtProcFilter]; ok {
				var per extprocfilterv3.ExtProcPerRoute
				if err := pf.UnmarshalTo(&per); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				validate(t, name, &per)
				if ilbMode == nil || !proto.Equal(per.GetOverrides().GetProcessingMode(), ilbMode) {
					t.Errorf("%s: route %s turns ext_proc on with %v, want ILB's mode %v", name, p.GetMatch().GetRouteConfiguration().GetVhost().GetRoute().GetName(), per.GetOverrides().GetProcessingMode(), ilbMode)
				}
				if a := p.GetMatch().GetRouteConfiguration().GetVhost().GetRoute().GetAction(); a != networkingv1alpha3.EnvoyFilter_RouteConfigurationMatch_RouteMatch_ANY {
					t.Errorf("%s: matches routes of action %v, want any (a direct response too)", name, a)
				}
				continue
			}
			base := &routev3.Route{
				Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: "outbound|8000||engine"}}},
			}
			merged := mergeInto(t, base, r)
			if got := merged.GetRoute().GetIdleTimeout().AsDuration(); got != c.Envoy.RouteIdleTimeout.Std() {
				t.Errorf("%s: idle timeout %v", name, got)
			}
		default:
			t.Errorf("%s: unexpected patch", name)
		}
	}
	for name := range ilbFilters {
		if name != wellknown.Router && !seen[name] {
			t.Errorf("ILB's listener has filter %s, which the EnvoyFilter does not add", name)
		}
	}
}

// decodeValue decodes a patch value strictly into msg with
// envoy.DecodeYAML.
func decodeValue[M proto.Message](t *testing.T, name string, value *structpb.Struct, msg M) M {
	t.Helper()
	js, err := protojson.Marshal(value)
	if err != nil {
		t.Fatal(err)
	}
	if err := envoy.DecodeYAML(js, msg); err != nil {
		t.Fatalf("%s: %v\n%s", name, err, js)
	}
	return msg
}

// decodeTypedConfig decodes the value's typed_config strictly into msg,
// which must be the message its @type names.
func decodeTypedConfig(t *testing.T, name string, value *structpb.Struct, msg proto.Message) proto.Message {
	t.Helper()
	tc := value.GetFields()["typed_config"].GetStructValue()
	typeURL := tc.GetFields()["@type"].GetStringValue()
	mt, err := protoregistry.GlobalTypes.FindMessageByURL(typeURL)
	if err != nil {
		t.Fatalf("%s: typed_config @type %q: %v", name, typeURL, err)
	}
	if msg.ProtoReflect().Descriptor().FullName() != mt.Descriptor().FullName() {
		t.Fatalf("%s: typed_config is a %s, want %s", name, mt.Descriptor().FullName(), msg.ProtoReflect().Descriptor().FullName())
	}
	fields := proto.Clone(tc).(*structpb.Struct)
	delete(fields.Fields, "@type")
	decodeValue(t, name, fields, msg)
	return msg
}

func validate(t *testing.T, name string, msg proto.Message) {
	t.Helper()
	if err := envoy.Validate(msg); err != nil {
		t.Errorf("%s: %v", name, err)
	}
}

// mergeInto applies a MERGE patch as istiod does (proto.Merge into a copy
// of base) and validates the result.
func mergeInto[M proto.Message](t *testing.T, base, patch M) M {
	t.Helper()
	merged := proto.Clone(base).(M)
	proto.Merge(merged, patch)
	validate(t, "merged", merged)
	return merged
}
