package route_test

import (
	"slices"
	"testing"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/route"
	"github.com/ilbproject/ilb/weights"
)

// TestTargets: a cell's weighted clusters in order, then the clusters its
// source may reach for the model with weight 0 (spill targets), each with
// the round trip from the source; residency keeps the rest out.
func TestTargets(t *testing.T) {
	c, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, source string
		weighted     []weights.Target
		want         []route.Target
	}{
		{"edge-us: one weighted, the others spill", "edge-us", []weights.Target{{Cluster: "eu-west-tgi", Weight: 10000}}, []route.Target{
			{Cluster: "eu-west-tgi", Weight: 10000, RTT: 0.078, Capacity: 6000},
			{Cluster: "us-east-vllm", Capacity: 12000}, // same region: the intra-region default (filled below)
			{Cluster: "eu-west-vllm", RTT: 0.078, Capacity: 12000},
		}},
		{"edge-eu: residency keeps us-east out", "edge-eu", []weights.Target{{Cluster: "eu-west-vllm", Weight: 10000}}, []route.Target{
			{Cluster: "eu-west-vllm", Weight: 10000, Capacity: 12000}, // RTT 0 here: the intra-region default
			{Cluster: "eu-west-tgi", Capacity: 6000},
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src, _ := c.Source(tt.source)
			got := route.Targets(c, src, weights.Cell{Source: tt.source, Model: "qwen2.5-7b-instruct", Targets: tt.weighted})
			intra := config.DefaultIntraRegion.RTTMs / 1000
			for i := range tt.want {
				if tt.want[i].RTT == 0 {
					tt.want[i].RTT = intra
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("targets %+v\nwant %+v", got, tt.want)
			}
		})
	}
}
