package xds

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"
)

// YAML renders the resources as one YAML document with the lists
// clusters, endpoints, routes and listeners, each item in Envoy's JSON
// mapping (what `envoy --config-yaml` and the admin config_dump use). The
// output is stable: keys sorted, whitespace normalised. It is what golden
// files and `ilb envoy-config --resources` show.
func (r *Resources) YAML() ([]byte, error) {
	doc := map[string][]json.RawMessage{}
	for _, part := range []struct {
		key   string
		items []types.Resource
	}{
		{"clusters", asResources(r.Clusters)},
		{"endpoints", asResources(r.Endpoints)},
		{"routes", asResources(r.Routes)},
		{"listeners", asResources(r.Listeners)},
	} {
		list := []json.RawMessage{}
		for _, it := range part.items {
			b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(it)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", part.key, err)
			}
			var buf bytes.Buffer
			if err := json.Compact(&buf, b); err != nil { // protojson randomises spaces
				return nil, fmt.Errorf("%s: %w", part.key, err)
			}
			list = append(list, buf.Bytes())
		}
		doc[part.key] = list
	}
	js, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("resources: %w", err)
	}
	out, err := yaml.JSONToYAML(js)
	if err != nil {
		return nil, fmt.Errorf("resources: %w", err)
	}
	return out, nil
}
