package controller_test

import (
	"errors"
	"math"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/weights"
)

// FuzzParseDemandFile feeds arbitrary bytes to the demand file parser of
// `ilb solve --demand`, with the demo configuration. Invariants: no panic;
// the same bytes give the same answer; a refusal is a decode error
// ("demand file: ...") or names the row it is about ("demand[i]...",
// "replicas[i]..." with i a row of the file); an accepted file gives
// demand only for configured sources, canonical models and known
// priorities, with finite rates >= 0, and a state for every configured
// cluster with counts >= 0, ramps in [0, 1] and a finite capacity >= 0.
func FuzzParseDemandFile(f *testing.F) {
	c, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		f.Fatal(err)
	}
	demo, err := os.ReadFile("../examples/demo/demand.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(demo)
	for _, s := range []string{
		"",
		"demand: []\n",
		"demand:\n  - {source: edge-us, model: llama3-8b, requests_per_second: 1}\n",
		"demand:\n  - {source: edge-us, model: llama3-8b, requests_per_second: 1e200, prompt_tokens: 1e200, output_tokens: 1}\n",
		"demand:\n  - {source: edge-us, model: qwen-7b, priority: critical, requests_per_second: .inf, prompt_tokens: .nan, output_tokens: -1}\n",
		"demand:\n  - {source: edge-mars, model: gpt-9, priority: urgent}\n  - {source: edge-us, model: llama3-8b}\n  - {source: edge-us, model: llama-3.1-8b-instruct, priority: standard}\n",
		"replicas:\n  - {cluster: us-east-vllm, ready: 9223372036854775807, warming: [1, 0, 0.5, 1e-300]}\n  - {cluster: us-east-vllm, ready: 0}\n",
		"replicas:\n  - {cluster: nowhere, ready: -1, warming: [2, .nan], draining: -1, unhealthy: -1}\n",
		"demand: {source: edge-us}\n",
		"demand: &d\n  - {source: edge-us, model: llama3-8b}\nreplicas: *d\n",
		"demand: []\n---\ndemand: [1]\n",
		"rows: []\n",
	} {
		f.Add([]byte(s))
	}
	rowRE := regexp.MustCompile(`^(demand|replicas)\[([0-9]+)\]`)
	f.Fuzz(func(t *testing.T, data []byte) {
		d, st, err := controller.ParseDemandFile(c, data)
		d2, st2, err2 := controller.ParseDemandFile(c, data)
		if fuzzErrString(err) != fuzzErrString(err2) || !reflect.DeepEqual(d, d2) || !reflect.DeepEqual(st, st2) {
			t.Fatalf("not deterministic: %v, then %v", err, err2)
		}
		if err != nil {
			if d != nil || st != nil {
				t.Fatalf("a refusal with results: %v %v", d, st)
			}
			rows := strings.Count(string(data), "\n") + 1 // a row takes a line at least
			for _, e := range fuzzLeaves(err) {
				msg := e.Error()
				if strings.HasPrefix(msg, "demand file: ") {
					continue
				}
				m := rowRE.FindStringSubmatch(msg)
				if m == nil {
					t.Fatalf("problem %q names no row", msg)
				}
				if i, _ := strconv.Atoi(m[2]); i >= rows {
					t.Fatalf("problem %q names row %d of a %d-line file", msg, i, rows)
				}
			}
			return
		}
		for k, r := range d {
			if _, ok := c.Source(k.Source); !ok {
				t.Fatalf("demand for unknown source %q", k.Source)
			}
			if m, ok := c.ResolveModel(k.Model); !ok || m != k.Model {
				t.Fatalf("demand for model %q, which is not a canonical name", k.Model)
			}
			if _, err := weights.ParsePriority(k.Priority.String()); err != nil {
				t.Fatalf("demand for priority %d: %v", k.Priority, err)
			}
			if !finite(r.RequestsPerSecond) || !finite(r.CostPerSecond) {
				t.Fatalf("demand of %+v is %+v: want finite rates >= 0", k, r)
			}
		}
		for _, e := range c.Clusters {
			s, ok := st[e.Name]
			switch {
			case !ok:
				t.Fatalf("no state for cluster %s", e.Name)
			case s.Ready < 0 || s.Draining < 0 || s.Unhealthy < 0 || !finite(s.Capacity):
				t.Fatalf("state of %s: %+v", e.Name, s)
			}
			for _, w := range s.Warming {
				if !finite(w) || w > 1 {
					t.Fatalf("state of %s: ramp %v", e.Name, w)
				}
			}
		}
		if len(st) != len(c.Clusters) {
			t.Fatalf("%d states for %d clusters", len(st), len(c.Clusters))
		}
	})
}

// TestParseDemandFileRefusals covers what the fuzzer found: a cost that
// overflows to +Inf from finite inputs, a second YAML document and a
// second row for one cluster were accepted; each is now a problem naming
// its row.
func TestParseDemandFileRefusals(t *testing.T) {
	c, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, file, want string
	}{
		{
			"cost overflows",
			"demand:\n  - {source: edge-us, model: llama3-8b, requests_per_second: 1e200, prompt_tokens: 1e200, output_tokens: 1}\n",
			"demand[0]: 1e+200 requests/s of 1e+200 prompt and 1 output tokens cost +Inf token-cost units/s: want a finite cost",
		},
		{
			"second document",
			"demand: []\n---\ndemand: [{source: edge-us}]\n",
			"demand file: the file holds more than one YAML document",
		},
		{
			"second row for a cluster",
			"replicas:\n  - {cluster: us-east-vllm, ready: 1}\n  - {cluster: us-east-vllm, ready: 0}\n",
			"replicas[1]: a second row for cluster us-east-vllm (the first is replicas[0])",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, st, err := controller.ParseDemandFile(c, []byte(tt.file))
			if err == nil || err.Error() != tt.want {
				t.Fatalf("ParseDemandFile = %v, %v, %v; want the error %q", d, st, err, tt.want)
			}
		})
	}
}

// fuzzErrString is an error's text, "<nil>" for none.
func fuzzErrString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// finite reports a finite number >= 0.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0 }

// fuzzLeaves flattens joined errors.
func fuzzLeaves(err error) []error {
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		var out []error
		for _, e := range joined.Unwrap() {
			out = append(out, fuzzLeaves(e)...)
		}
		return out
	}
	return []error{err}
}
