package controller_test

import (
	"context"
	"encoding/json"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/weights"
)

// publish builds one version of cells and records it in h, as the
// controller does: prepare, then commit.
func publish(t *testing.T, h *controller.History, status string, cells ...weights.Cell) *weights.Weights {
	t.Helper()
	w, err := weights.New("test", time.Unix(1700000000, 0), cells)
	if err != nil {
		t.Fatal(err)
	}
	if status != "" {
		w = w.WithStatus(status)
	}
	commit, err := h.Prepare(context.Background(), w)
	if err != nil {
		t.Fatal(err)
	}
	commit()
	return w
}

func cell(source string, shed float64, ts ...weights.Target) weights.Cell {
	c := weights.Cell{Source: source, Model: "m", Targets: ts}
	c.Shed[weights.Standard] = shed
	return c
}

func tg(cluster string, w uint32) weights.Target { return weights.Target{Cluster: cluster, Weight: w} }

func TestHistoryVersions(t *testing.T) {
	clock := time.Unix(1800000000, 0)
	h := controller.NewHistory(3, func() time.Time { clock = clock.Add(time.Second); return clock })
	if got := h.Versions(10); len(got) != 0 {
		t.Fatalf("empty history: %v", got)
	}
	var ws []*weights.Weights
	for i := range 5 {
		ws = append(ws, publish(t, h, "", cell("s", 0, tg("a", uint32(1000*(i+1))), tg("b", uint32(10000-1000*(i+1))))))
	}
	tests := []struct {
		name string
		n    int
		want []*weights.Weights
	}{
		{"more than kept", 10, []*weights.Weights{ws[4], ws[3], ws[2]}},
		{"fewer than kept", 2, []*weights.Weights{ws[4], ws[3]}},
		{"zero", 0, nil},
		{"negative", -1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := h.Versions(tt.n)
			if len(got) != len(tt.want) {
				t.Fatalf("Versions(%d) has %d versions; want %d", tt.n, len(got), len(tt.want))
			}
			for i, w := range tt.want {
				if got[i].Version != w.Version() || got[i].Policy != "test" || len(got[i].Cells) != 1 {
					t.Errorf("Versions(%d)[%d] = %+v; want version %s", tt.n, i, got[i], w.Version())
				}
			}
			if len(got) > 1 && !got[0].Published.After(got[1].Published) {
				t.Errorf("newest first: %v then %v", got[0].Published, got[1].Published)
			}
		})
	}
	publish(t, h, "fallback ran", cell("s", 0, tg("a", 10000)))
	if got := h.Versions(1)[0]; got.Status != "fallback ran" {
		t.Errorf("status = %q; want the weights' status", got.Status)
	}
}

func TestDiff(t *testing.T) {
	h := controller.NewHistory(0, nil)
	summary := func(cells ...weights.Cell) controller.VersionSummary {
		publish(t, h, "", cells...)
		return h.Versions(1)[0]
	}
	base := summary(cell("s1", 0, tg("a", 5000), tg("b", 5000)), cell("s2", 0, tg("a", 10000)))
	tests := []struct {
		name string
		b    controller.VersionSummary
		want []controller.CellDiff
	}{
		{"same routing", base, nil},
		{
			"weights move", summary(cell("s1", 0, tg("a", 3000), tg("b", 7000)), cell("s2", 0, tg("a", 10000))),
			[]controller.CellDiff{{Source: "s1", Model: "m", Clusters: []controller.WeightChange{{Cluster: "a", Before: 5000, After: 3000}, {Cluster: "b", Before: 5000, After: 7000}}}},
		},
		{
			"cluster dropped and added, shed starts", summary(cell("s1", 0.25, tg("b", 4000), tg("c", 6000)), cell("s2", 0, tg("a", 10000))),
			[]controller.CellDiff{{
				Source: "s1", Model: "m",
				Clusters: []controller.WeightChange{{Cluster: "b", Before: 5000, After: 4000}, {Cluster: "c", After: 6000}, {Cluster: "a", Before: 5000}},
				Shed:     []controller.ShedChange{{Priority: weights.Standard, After: 0.25}},
			}},
		},
		{
			"cell added and removed", summary(cell("s1", 0, tg("a", 5000), tg("b", 5000)), cell("s3", 0, tg("a", 10000))),
			[]controller.CellDiff{
				{Source: "s2", Model: "m", Removed: true, Clusters: []controller.WeightChange{{Cluster: "a", Before: 10000}}},
				{Source: "s3", Model: "m", Added: true, Clusters: []controller.WeightChange{{Cluster: "a", After: 10000}}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := controller.Diff(base, tt.b); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Diff =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
	// The JSON form round-trips (the admin API serves it).
	d := controller.Diff(base, tests[2].b)
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var back []controller.CellDiff
	if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back, d) {
		t.Errorf("JSON round trip: %v\n%s", err, b)
	}
}

// TestHistoryConcurrent publishes into a History while readers read it;
// run with -race.
func TestHistoryConcurrent(t *testing.T) {
	h := controller.NewHistory(4, nil)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, v := range h.Versions(10) {
					_ = controller.Diff(v, v)
				}
			}
		})
	}
	for i := range 50 {
		publish(t, h, "", cell("s", 0, tg("a", uint32(100*(i+1))), tg("b", uint32(10000-100*(i+1)))))
	}
	close(stop)
	wg.Wait()
	if got := len(h.Versions(10)); got != 4 {
		t.Errorf("kept %d versions; want 4", got)
	}
}
