package envoy

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"
)

// Bundle is Envoy configuration checked together: at most one bootstrap
// and any number of xDS resources, such as a bootstrap plus what the
// control plane serves it. References resolve across the whole bundle.
type Bundle struct {
	Bootstrap *bootstrapv3.Bootstrap
	Clusters  []*clusterv3.Cluster
	Endpoints []*endpointv3.ClusterLoadAssignment
	Routes    []*routev3.RouteConfiguration
	Listeners []*listenerv3.Listener
}

// resourceKeys are the top-level keys of a resource file, the format
// `ilb envoy-config --resources` prints and xds/testdata holds.
var resourceKeys = []string{"clusters", "endpoints", "routes", "listeners"}

// DecodeBundle decodes one YAML document, either an Envoy bootstrap or a
// resource file (a map with any of the lists clusters, endpoints, routes,
// listeners), strictly: unknown fields and unknown Any types are errors
// naming where they are. It does not validate; see [Bundle.Check].
func DecodeBundle(data []byte) (*Bundle, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("yaml: %w", err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil || top == nil {
		return nil, errors.New("the document is not a map: want an Envoy bootstrap or a resource file (clusters, endpoints, routes, listeners)")
	}
	var res, other []string
	for k := range top {
		if slices.Contains(resourceKeys, k) {
			res = append(res, k)
		} else {
			other = append(other, k)
		}
	}
	slices.Sort(other)
	switch {
	case len(res) == 0:
		b := &bootstrapv3.Bootstrap{}
		if err := DecodeYAML(data, b); err != nil {
			return nil, err
		}
		return &Bundle{Bootstrap: b}, nil
	case len(other) > 0:
		return nil, fmt.Errorf("top-level keys %s are not resource lists: a resource file has only %s (a bootstrap has none of them)",
			strings.Join(other, ", "), strings.Join(resourceKeys, ", "))
	}
	b := &Bundle{}
	var errs []error
	errs = append(errs, decodeList(data, top["clusters"], "clusters", &b.Clusters)...)
	errs = append(errs, decodeList(data, top["endpoints"], "endpoints", &b.Endpoints)...)
	errs = append(errs, decodeList(data, top["routes"], "routes", &b.Routes)...)
	errs = append(errs, decodeList(data, top["listeners"], "listeners", &b.Listeners)...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return b, nil
}

// decodeList decodes a JSON list of resources into out, one error per bad
// item, each naming its index.
func decodeList[T any, PT interface {
	*T
	proto.Message
}](data []byte, raw json.RawMessage, key string, out *[]PT) []error {
	if raw == nil {
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return []error{fmt.Errorf("%s: want a list: %w", key, err)}
	}
	var errs []error
	for i, it := range items {
		m := PT(new(T))
		if err := (protojson.UnmarshalOptions{}).Unmarshal(it, m); err != nil {
			errs = append(errs, fmt.Errorf("%s[%d]: decode %s: %w", key, i, m.ProtoReflect().Descriptor().FullName(), inYAML(err, data, it, []any{key, i})))
			continue
		}
		*out = append(*out, m)
	}
	return errs
}

// LoadBundle reads and merges files into one bundle; at most one may be a
// bootstrap.
func LoadBundle(paths ...string) (*Bundle, error) {
	out := &Bundle{}
	var errs []error
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b, err := DecodeBundle(data)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			continue
		}
		if b.Bootstrap != nil && out.Bootstrap != nil {
			errs = append(errs, fmt.Errorf("%s: a second bootstrap: check one Envoy's configuration at a time", p))
			continue
		}
		out.merge(b)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func (b *Bundle) merge(o *Bundle) {
	if o.Bootstrap != nil {
		b.Bootstrap = o.Bootstrap
	}
	b.Clusters = append(b.Clusters, o.Clusters...)
	b.Endpoints = append(b.Endpoints, o.Endpoints...)
	b.Routes = append(b.Routes, o.Routes...)
	b.Listeners = append(b.Listeners, o.Listeners...)
}

// Summary counts what the bundle holds, static resources of the bootstrap
// included, e.g. "bootstrap, 3 clusters, 1 listener".
func (b *Bundle) Summary() string {
	var parts []string
	if b.Bootstrap != nil {
		parts = append(parts, "bootstrap")
	}
	for _, n := range []struct {
		what string
		n    int
	}{
		{"cluster", len(b.allClusters())},
		{"endpoint assignment", len(b.Endpoints)},
		{"route configuration", len(b.Routes)},
		{"listener", len(b.allListeners())},
	} {
		if n.n == 1 {
			parts = append(parts, "1 "+n.what)
		} else if n.n > 1 {
			parts = append(parts, fmt.Sprintf("%d %ss", n.n, n.what))
		}
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

func (b *Bundle) allClusters() []*clusterv3.Cluster {
	return append(slices.Clone(b.Bootstrap.GetStaticResources().GetClusters()), b.Clusters...)
}

func (b *Bundle) allListeners() []*listenerv3.Listener {
	return append(slices.Clone(b.Bootstrap.GetStaticResources().GetListeners()), b.Listeners...)
}
