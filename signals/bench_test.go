package signals

import (
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
