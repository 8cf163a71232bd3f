package extproc_test

import (
	"context"
	"testing"
	"time"

	"github.com/ilbproject/ilb/live"
	"github.com/ilbproject/ilb/weights"
)

// TestNoCapacityIs503ForEveryPriority: when no cluster can take a request
// — the cell has no targets, or the live state excludes every one — the
// answer is 503 no_capacity whatever the request's priority and whatever
// shed fraction the weights carry: a 429 "shed" would tell a critical
// client the fleet is merely busy.
func TestNoCapacityIs503ForEveryPriority(t *testing.T) {
	allShed := weights.ShedFractions{weights.Critical: 1, weights.Standard: 1, weights.Sheddable: 1}
	allExcluded := &live.State{At: now, Clusters: map[string]live.Cluster{
		"us-east-vllm": {Excluded: "unhealthy"}, "eu-west-vllm": {Excluded: "unhealthy"}, "eu-west-tgi": {Excluded: "draining"},
	}}
	tests := []struct {
		name    string
		targets bool // the cell keeps its targets
		shed    weights.ShedFractions
		live    *live.State
	}{
		{"no targets, shed 1 for every priority", false, allShed, nil},
		{"no targets, no shed fraction", false, weights.ShedFractions{}, nil},
		{"every target excluded now, shed 1", true, allShed, allExcluded},
	}
	for _, tt := range tests {
		for _, prio := range []string{"critical", "standard", "sheddable"} {
			t.Run(tt.name+"/"+prio, func(t *testing.T) {
				h := start(t, true)
				publishQwen(t, h, tt.shed)
				if !tt.targets {
					publishEmptyQwen(t, h, tt.shed)
				}
				if tt.live != nil {
					h.srv.SetLive(tt.live)
				}
				resps := h.run(t, "edge-us", qwenRequest(prio)...)
				ir := resps[len(resps)-1].GetImmediateResponse()
				if ir == nil {
					t.Fatalf("answer %v; want 503", resps[len(resps)-1])
				}
				checkImmediate(t, ir, 503, "no_capacity", "", "no engine cluster can serve")
			})
		}
	}
}

// publishEmptyQwen publishes the demo weights with edge-us/qwen left
// without targets, as the controller does when no cluster can serve it.
func publishEmptyQwen(t *testing.T, h *harness, shed weights.ShedFractions) {
	t.Helper()
	var cells []weights.Cell
	for _, s := range h.cfg.Sources {
		for _, m := range h.cfg.Models {
			cell, _ := h.w.Cell(s.Name, m.Name)
			cell.Explanation = nil
			if s.Name == "edge-us" && m.Name == "qwen2.5-7b-instruct" {
				cell.Targets, cell.Shed = nil, shed
			}
			cells = append(cells, cell)
		}
	}
	w, err := weights.New("test", time.Time{}, cells)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.srv.Publish(context.Background(), w); err != nil {
		t.Fatal(err)
	}
}

// TestNoCapacityWhyWithoutWeights: a cell the weights give nothing says
// so, even when its source may reach clusters (spill targets, weight 0)
// that the live state does not exclude.
func TestNoCapacityWhyWithoutWeights(t *testing.T) {
	h := start(t, true)
	publishEmptyQwen(t, h, weights.ShedFractions{})
	h.srv.SetLive(&live.State{At: now, Clusters: map[string]live.Cluster{"us-east-vllm": free, "eu-west-vllm": free, "eu-west-tgi": free}})
	resps := h.run(t, "edge-us", qwenRequest("")...)
	ir := resps[len(resps)-1].GetImmediateResponse()
	if ir == nil {
		t.Fatalf("answer %v; want 503", resps[len(resps)-1])
	}
	checkImmediate(t, ir, 503, "no_capacity", "", "no cluster has capacity for it in the current weights")
}
