package envoy_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/ilbproject/ilb/envoy"
)

// FuzzBundle feeds arbitrary bytes to what `ilb validate --envoy` runs on
// each file: DecodeBundle (strict YAML/JSON decoding of a bootstrap or a
// resource file), then Check (ValidateAll into every Any and ILB's
// semantic checks), Errors and Summary. Invariants: no panic; an error
// has a message; Check is deterministic, sorted by Where, and every problem has a place and a
// message; Check does not change the bundle; Errors is nil exactly when
// every problem is a warning.
func FuzzBundle(f *testing.F) {
	var paths []string
	for _, g := range []string{"*.yaml", "testdata/*.yaml", "../examples/compose/envoy.yaml", "../xds/testdata/*.yaml"} {
		m, err := filepath.Glob(g)
		if err != nil {
			f.Fatal(err)
		}
		paths = append(paths, m...)
	}
	if len(paths) < 4 {
		f.Fatalf("seed files: found only %v", paths)
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		for _, seed := range splitResources(f, data) {
			f.Add(seed)
		}
	}
	for _, s := range []string{
		"",
		"null",
		"[]",
		"clusters: []\nnode: {id: a}",
		"clusters: {}",
		"routes: [null, 1, {name: r, virtual_hosts: [{name: v, domains: ['*'], routes: [{match: {prefix: /}, route: {weighted_clusters: {clusters: [{name: a, weight: 4294967295}, {name: b, weight: 4294967295}]}}}]}]}]}",
		"listeners: [{name: l, filter_chains: [{filters: [{name: hcm, typed_config: {'@type': type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager, stat_prefix: s, http_filters: [{name: r}]}}]}]}]",
		"static_resources: {clusters: [{name: c, type: STATIC, load_assignment: {cluster_name: c, endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 1.2.3.4, port_value: 70000}}}}]}]}}]}",
		"node: {id: a}\ndynamic_resources: {ads_config: {api_type: GRPC, grpc_services: [{envoy_grpc: {cluster_name: nowhere}}]}}",
		"{\"node\": {\"id\": \"a\"}, \"admin\": {\"address\": {\"pipe\": {\"path\": \"/x\"}}}}",
		"a: &a [x, x]\nb: [*a, *a]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := envoy.DecodeBundle(data)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("DecodeBundle error without a message")
			}
			return
		}
		if b == nil {
			t.Fatal("DecodeBundle returned neither a bundle nor an error")
		}
		before := cloneBundle(b)
		ps := b.Check()
		if !sameBundle(b, before) {
			t.Fatal("Check changed the bundle it checked")
		}
		if ps2 := b.Check(); !slices.Equal(ps, ps2) {
			t.Fatalf("Check is not deterministic:\n%v\nthen\n%v", ps, ps2)
		}
		if !slices.IsSortedFunc(ps, func(a, b envoy.Problem) int { return strings.Compare(a.Where, b.Where) }) {
			t.Fatalf("problems not sorted by where: %v", ps)
		}
		errs := 0
		for _, p := range ps {
			if p.Where == "" || p.Message == "" {
				t.Fatalf("problem without a place or a message: %#v", p)
			}
			if !p.Warning {
				errs++
			}
		}
		if (envoy.Errors(ps) == nil) != (errs == 0) {
			t.Fatalf("Errors(%v) = %v with %d errors", ps, envoy.Errors(ps), errs)
		}
		if b.Summary() == "" {
			t.Fatal("empty summary")
		}
	})
}

// cloneBundle deep-copies a bundle.
func cloneBundle(b *envoy.Bundle) *envoy.Bundle {
	c := &envoy.Bundle{}
	if b.Bootstrap != nil {
		c.Bootstrap = proto.CloneOf(b.Bootstrap)
	}
	c.Clusters = cloneAll(b.Clusters)
	c.Endpoints = cloneAll(b.Endpoints)
	c.Routes = cloneAll(b.Routes)
	c.Listeners = cloneAll(b.Listeners)
	return c
}

func cloneAll[T proto.Message](in []T) []T {
	out := make([]T, len(in))
	for i, m := range in {
		out[i] = proto.CloneOf(m)
	}
	return out
}

// splitResources returns a bootstrap as it is, and a resource file as one
// file per resource: small seeds keep the fuzzer fast (a whole resource
// file of the demo is 15 KB and takes milliseconds to decode), and each
// resource still reaches every check of its kind.
func splitResources(f *testing.F, data []byte) [][]byte {
	var top map[string][]any
	if yaml.Unmarshal(data, &top) != nil {
		return [][]byte{data} // a bootstrap: not lists at the top
	}
	var out [][]byte
	for key, items := range top {
		for _, it := range items {
			one, err := yaml.Marshal(map[string][]any{key: {it}})
			if err != nil {
				f.Fatal(err)
			}
			out = append(out, one)
		}
	}
	return out
}

// sameBundle reports whether two bundles hold equal messages.
func sameBundle(a, b *envoy.Bundle) bool {
	return proto.Equal(a.Bootstrap, b.Bootstrap) &&
		slices.EqualFunc(a.Clusters, b.Clusters, eq) &&
		slices.EqualFunc(a.Endpoints, b.Endpoints, eq) &&
		slices.EqualFunc(a.Routes, b.Routes, eq) &&
		slices.EqualFunc(a.Listeners, b.Listeners, eq)
}

func eq[T proto.Message](x, y T) bool { return proto.Equal(x, y) }
