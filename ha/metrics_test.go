package ha_test

import (
	"flag"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/ha"
	"github.com/ilbproject/ilb/internal/promtest"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// TestMetricsGolden pins the exposition of a replica that has not yet
// reached etcd: not leading, etcd not reachable, every outcome at 0, the
// ages unknown (NaN).
func TestMetricsGolden(t *testing.T) {
	c, err := config.Decode([]byte(world))
	if err != nil {
		t.Fatal(err)
	}
	c.HA.Endpoints = []string{"127.0.0.1:1"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r, err := ha.New(ha.Options{Config: c, Name: "golden", Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	promtest.Golden(t, promtest.Exposition(t, reg), "testdata/metrics.golden", *update)
}
