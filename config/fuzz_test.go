package config_test

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/ilbproject/ilb/config"
)

// fuzzBase is a small valid world with every section set.
const fuzzBase = `
regions: [{name: us}, {name: eu}]
network:
  - {from: us, to: eu, rtt_ms: 80, egress_usd_per_gb: 0.05}
  - {from: eu, to: us, rtt_ms: 80, egress_usd_per_gb: 0.05}
sources:
  - {name: edge-us, region: us, routing: cluster, default_priority: sheddable, trust_priority_header: true}
  - {name: edge-eu, region: eu, allowed_regions: [eu], fail_mode: closed, debug: true}
models:
  - {name: m1, aliases: [m-one], context_tokens: 8192, max_output_tokens: 1024, ttft_budget_ms: 500}
  - {name: m2, prompt_token_cost: 1, output_token_cost: 3}
profiles: [{name: p, capacity_per_replica: 100}]
clusters:
  - {name: us-a, region: us, engine: vllm, models: [m1, m2], profile: p, endpoints: ["10.0.0.1:8000"], protocol: http2}
  - name: eu-a
    region: eu
    engine: trtllm
    models: [m1, m2]
    profile: p
    discovery: {type: dns, name: eu-a.svc.local, port: 8000}
    metrics: {path: /prometheus/metrics, mapping: custom}
controller: {tick: 5s, policy: waterfall, target_utilization: 0.7}
signals:
  interval: 2s
  mappings:
    custom: {waiting: 'q{kind="w"}', running: r, kv_usage: 'kv_used / kv_max', model_label: model}
envoy: {message_timeout: 2s, rollout: {canary_percent: 10, soak: 30s}}
extproc: {max_body_bytes: 1048576}
listen: {xds: "127.0.0.1:28000", extproc: "127.0.0.1:28001", admin: "127.0.0.1:28002"}
`

// fuzzSeeds are configuration snippets that reach the corners of decoding
// and validation: every section, YAML anchors and aliases, bad types,
// several documents, tabs and odd scalars.
var fuzzSeeds = []string{
	"",
	"---\n",
	"regions: []\n",
	"regions: [{name: us}]\nregions: [{name: eu}]\n",
	"regions: [{name: us}]\n---\nregions: [{name: eu}]\n",
	"a: &a [x, x]\nb: [*a, *a]\n",
	"regions: &r [{name: us}]\nsources: [{name: s, region: us, allowed_regions: *r}]\n",
	"controller: {target_utilization: .nan, tick: -5s, policy: optimizer}\n",
	"controller: {target_utilization: .inf, utilization_cost: [{up_to: 1e308, cost: -1}]}\n",
	"network: [{from: us, to: us, rtt_ms: 1e999, egress_usd_per_gb: -0}]\n",
	"signals: {interval: 0s, max_body_bytes: -1, mappings: {m: {waiting: 'a{b=\"c\"} / d', running: '{'}}}\n",
	"security: {tls: {cert_file: a, key_file: b, client_ca_file: c}, peers: [{identity: 'spiffe://x/*', sources: [edge]}], admin: {tls: true, token_file: t}}\n",
	"clusters: [{name: c, region: r, engine: vllm, models: [m], profile: p, discovery: {type: file, file: /tmp/x}, endpoints: ['[::1]:80']}]\n",
	"extproc: {max_body_bytes: 9223372036854775807, decision_log_size: 0}\n",
	"envoy: {retry: {on: [5xx], status_codes: [99]}, rollout: {canary_percent: 101}}\n",
	"\tregions: x\n",
	"regions: !!binary aGVsbG8=\n",
	"{\"regions\": [{\"name\": \"us\"}]}\n",
}

// FuzzParse feeds arbitrary bytes to Parse and Decode. Invariants: no
// panic; Parse is Decode then Validate, and the same input decoded twice
// gives the same answer (the same error text, or equal configurations); an
// error is either a decode error (every problem "decode: ...") or a join of
// *FieldError each with a field path and a message, never a mix; an
// accepted configuration holds only finite, non-negative numbers and
// non-negative integers and durations.
func FuzzParse(f *testing.F) {
	paths, err := filepath.Glob("../examples/*/ilb.yaml")
	if err != nil || len(paths) == 0 {
		f.Fatalf("no example configurations: %v", err)
	}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(fuzzBase))
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Parse(data)
		var fe *config.FieldError
		if err != nil && !errors.As(err, &fe) {
			checkDecodeError(t, err)
			return
		}
		// Parse is Decode then Validate: decoding the same input again
		// gives the same answer.
		d, derr := config.Decode(data)
		if derr != nil || d == nil {
			t.Fatalf("Parse got past decoding, a second Decode did not: %v", derr)
		}
		if verr := d.Validate(); errString(err) != errString(verr) {
			t.Fatalf("Parse error %q is not Decode+Validate's %q", err, verr)
		}
		if err != nil {
			checkFieldErrors(t, err)
			return
		}
		if c == nil {
			t.Fatal("Parse returned neither a configuration nor an error")
		}
		if !reflect.DeepEqual(c, d) {
			t.Fatalf("two decodes of one input differ:\n%+v\n%+v", c, d)
		}
		checkNumbers(t, "", reflect.ValueOf(c).Elem())
	})
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// leaves flattens joined errors.
func leaves(err error) []error {
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		var out []error
		for _, e := range joined.Unwrap() {
			out = append(out, leaves(e)...)
		}
		return out
	}
	return []error{err}
}

// checkDecodeError: every problem of a decode error says it is one and
// none is a validation problem.
func checkDecodeError(t *testing.T, err error) {
	t.Helper()
	for _, e := range leaves(err) {
		var fe *config.FieldError
		if errors.As(e, &fe) {
			t.Fatalf("decode error holds a FieldError: %v", e)
		}
		if !strings.HasPrefix(e.Error(), "decode: ") || len(e.Error()) <= len("decode: ") {
			t.Fatalf("decode problem %q does not start with \"decode: \" and a reason", e)
		}
	}
}

// checkFieldErrors: a validation error is a join of *FieldError, each
// with a path and a message.
func checkFieldErrors(t *testing.T, err error) {
	t.Helper()
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) {
		t.Fatalf("validation error %q is not a joined error", err)
	}
	for _, e := range leaves(err) {
		var fe *config.FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("validation problem %q is not a *config.FieldError", e)
		}
		if fe.Path == "" || fe.Msg == "" {
			t.Fatalf("FieldError %#v lacks a path or a message", fe)
		}
	}
}

// checkNumbers walks an accepted configuration: every float is finite and
// >= 0, every integer and duration >= 0.
func checkNumbers(t *testing.T, path string, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		if f := v.Float(); math.IsNaN(f) || math.IsInf(f, 0) || f < 0 {
			t.Fatalf("accepted configuration has %s = %v", path, f)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if v.Int() < 0 {
			t.Fatalf("accepted configuration has %s = %v", path, v.Int())
		}
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			checkNumbers(t, path, v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				checkNumbers(t, path+"."+v.Type().Field(i).Name, v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			checkNumbers(t, path+"["+strconv.Itoa(i)+"]", v.Index(i))
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			checkNumbers(t, path+"["+iter.Key().String()+"]", iter.Value())
		}
	}
}

// TestValidateIsStable: found by FuzzParse: the problems of
// signals.mappings came in map order, so one file gave its problems in a
// different order from one run to the next.
func TestValidateIsStable(t *testing.T) {
	data := []byte("signals:\n  mappings: {a: {}, b: {}, c: {}, d: {}, e: {}}\n")
	_, want := config.Parse(data)
	if want == nil || !strings.Contains(want.Error(), "signals.mappings.a: waiting and running are required metric names\nsignals.mappings.b:") {
		t.Fatalf("Parse = %v; want the mappings' problems in name order", want)
	}
	for range 20 {
		if _, err := config.Parse(data); errString(err) != errString(want) {
			t.Fatalf("Parse gave\n%v\nthen\n%v", want, err)
		}
	}
}
