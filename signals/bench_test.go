package signals

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/config"
)

// BenchmarkScrape measures the CPU of scraping one vLLM replica over real
// HTTP on loopback: the health probe, the metrics GET of the fixture
// (vllm.txt, 160 lines, two models), the filtered parse, the mapping and
// the state update. The engine side is a static handler in the same
// process, so ns/op is an upper bound of the monitor's own cost.
// CPU per 1,000 replicas scraped per second = ns/op × 1000 / 1e9.
func BenchmarkScrape(b *testing.B) {
	body := readFixture(b, "vllm.txt")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/metrics" {
			w.Header().Set("Content-Type", ctTxt)
			_, _ = w.Write(body)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	b.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	h := newHarness(b, Options{Config: testConfig(b, staticCluster("c1", addr), baseSignals)})
	cl := h.m.clusters[0]
	r := cl.replicas[addr]
	b.ReportAllocs()
	for b.Loop() {
		h.clock.Advance(time.Second)
		res := h.m.scrape(h.ctx, cl, addr)
		h.m.applyScrape(r, res, h.clock.Now())
	}
	if r.lastErr != "" || r.metrics.Running != 17 {
		b.Fatalf("bad scrape: %q %+v", r.lastErr, r.metrics)
	}
}

// BenchmarkParse compares the filtered parse with expfmt on the whole
// vLLM exposition.
func BenchmarkParse(b *testing.B) {
	body := readFixture(b, "vllm.txt")
	mp, err := builtinMappings[config.EngineVLLM].compile()
	if err != nil {
		b.Fatal(err)
	}
	all := map[string]struct{}{}
	for _, line := range strings.Split(string(body), "\n") {
		if name, _ := metricName([]byte(line)); len(name) > 0 {
			all[string(name)] = struct{}{}
		} else if f := strings.Fields(line); len(f) > 2 {
			all[f[2]] = struct{}{}
		}
	}
	h := http.Header{"Content-Type": {ctTxt}}
	for _, bm := range []struct {
		name string
		want map[string]struct{}
	}{{"filtered", mp.want}, {"whole", all}} {
		b.Run(bm.name, func(b *testing.B) {
			var scratch parseScratch
			b.ReportAllocs()
			for b.Loop() {
				if _, err := parseExposition(body, h, bm.want, &scratch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzExposition feeds arbitrary bodies through parse and every built-in
// mapping: no panic, and never a NaN, an infinity, a negative count or a
// KV usage outside [0, 1] in the result.
func FuzzExposition(f *testing.F) {
	for _, name := range []string{"vllm.txt", "sglang.txt", "tgi.txt", "trtllm.txt", "triton_trtllm.txt", "nan_values.txt", "missing_metric.txt", "garbage.txt", "truncated.txt"} {
		f.Add(readFixture(f, name), false)
	}
	f.Add(readFixture(f, "openmetrics.txt"), true)
	f.Add([]byte("vllm:num_requests_waiting 1e308\nvllm:num_requests_waiting{a=\"b\"} 1e308\nvllm:num_requests_running -0\n"), false)
	mappings := map[config.EngineKind]*mapping{}
	for k, spec := range builtinMappings {
		mp, err := spec.compile()
		if err != nil {
			f.Fatal(err)
		}
		mappings[k] = mp
	}
	f.Fuzz(func(t *testing.T, body []byte, openMetrics bool) {
		ct := ctTxt
		if openMetrics {
			if len(body) > 2048 {
				return // expfmt's OpenMetrics parser costs milliseconds per line
			}
			ct = ctOM
		}
		for kind, mp := range mappings {
			x, err := readWith(mp, body, ct)
			if err != nil {
				continue
			}
			m := x.metrics
			for _, v := range []float64{m.Waiting, m.Running, m.KVUsage, m.PromptTokens, m.GenerationTokens, m.TokensPerSecond, x.tokens} {
				if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
					t.Fatalf("%s: bad value %v in %+v", kind, v, m)
				}
			}
			if m.KVUsage > 1 || (!m.KVKnown && m.KVUsage != 0) {
				t.Fatalf("%s: KV %v known=%v", kind, m.KVUsage, m.KVKnown)
			}
			if !x.good && len(m.Problems) == 0 {
				t.Fatalf("%s: bad metrics without a problem: %+v", kind, m)
			}
		}
	})
}
