package extproc_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/live"
	"github.com/ilbproject/ilb/picker"
	"github.com/ilbproject/ilb/signals"
)

// withAdapters declares two LoRA adapters of the demo's llama model:
// sql-lora served in eu-west-vllm only, chat-lora wherever llama is; and
// turns replica picking on.
func withAdapters(o *extproc.Options) {
	for i := range o.Config.Models {
		if o.Config.Models[i].Name == "llama-3.1-8b-instruct" {
			o.Config.Models[i].Adapters = []config.Adapter{{Name: "sql-lora", Clusters: []string{"eu-west-vllm"}}, {Name: "chat-lora"}}
		}
	}
	for i := range o.Config.Clusters {
		o.Config.Clusters[i].ReplicaPicking.Enabled = true
	}
}

// TestAdapterRouting: a request naming a LoRA adapter is routed as its
// base model (its demand, its cell) but only to the clusters that serve
// the adapter, and within one to a replica that has it loaded; the record
// says so. An adapter not served by any cluster the source may use gets a
// 503 naming the adapter.
func TestAdapterRouting(t *testing.T) {
	tests := []struct {
		name, source, model string
		loaded              string // replica whose engine reports the adapter running ("" none)
		saturated           bool   // and reports saturation
		waiting             string // and reports requests of this adapter waiting ("" none)
		before              int    // requests of the base model from the source first
		wantCluster         string // "" any
		wantReplica         string // "" any
		wantTier            string
		wantStatus          int
		full                string // replica whose engine runs max_lora other adapters, this one's requests waiting ("" none)
		lasting             bool   // the loaded replica's engine left requests waiting at every scrape over capacity.LastingFor
	}{
		{"an adapter of one cluster goes there", "edge-us", "sql-lora", "", false, "", 0, "eu-west-vllm", "", picker.AdapterSlot, 0, "", false},
		{"the replica with it loaded", "edge-us", "sql-lora", "127.0.0.1:18122", false, "", 0, "eu-west-vllm", "127.0.0.1:18122", picker.AdapterLoaded, 0, "", false},
		{"an adapter of every cluster: the base model's draw", "edge-eu", "chat-lora", "127.0.0.1:18121", false, "", 0, "eu-west-vllm", "127.0.0.1:18121", picker.AdapterLoaded, 0, "", false},
		// A fifth of the cluster's requests: one replica of two is what
		// its share asks for, so it waits where it is loaded.
		{"saturated with it, a small share: it waits there", "edge-eu", "sql-lora", "127.0.0.1:18122", true, "sql-lora", 4, "eu-west-vllm", "127.0.0.1:18122", picker.AdapterBusy, 0, "", false},
		// Its only request so far: its share asks for both replicas, and
		// its requests wait there for the batch.
		{"saturated with it, all the requests: it spreads", "edge-eu", "sql-lora", "127.0.0.1:18122", true, "sql-lora", 0, "eu-west-vllm", "127.0.0.1:18121", picker.AdapterSpread, 0, "", false},
		// A fifth of the requests, but its holder's engine kept a queue
		// over two scrapes, of adapters it runs: it admits no more.
		{"a small share, requests of it waiting for the batch, a queue that lasts: it spreads", "edge-eu", "sql-lora", "127.0.0.1:18122", false, "sql-lora", 4, "eu-west-vllm", "127.0.0.1:18121", picker.AdapterSpread, 0, "", true},
		{"a small share, requests of it waiting for the batch, a queue at one scrape: it stays", "edge-eu", "sql-lora", "127.0.0.1:18122", false, "sql-lora", 4, "eu-west-vllm", "127.0.0.1:18122", picker.AdapterLoaded, 0, "", false},
		{"not saturated, requests of it waiting for the batch, all the requests: it spreads", "edge-eu", "sql-lora", "127.0.0.1:18122", false, "sql-lora", 0, "eu-west-vllm", "127.0.0.1:18121", picker.AdapterSpread, 0, "", false},
		// A request of another adapter waits there for a slot: spreading
		// would take a slot another adapter lacks.
		{"saturated with it and a request waiting for a slot, all the requests: it waits there", "edge-eu", "sql-lora", "127.0.0.1:18122", true, "chat-lora", 0, "eu-west-vllm", "127.0.0.1:18122", picker.AdapterBusy, 0, "", false},
		// Its requests wait for a slot on one replica, whose batch runs
		// four other adapters: there, rather than load it on the other.
		{"waiting for a slot beats a free slot", "edge-eu", "sql-lora", "", false, "", 0, "eu-west-vllm", "127.0.0.1:18122", picker.AdapterSlotWait, 0, "127.0.0.1:18122", false},
		// Running on one replica, waiting for a slot on the other: where
		// it runs.
		{"running beats waiting for a slot", "edge-eu", "sql-lora", "127.0.0.1:18121", false, "", 0, "eu-west-vllm", "127.0.0.1:18121", picker.AdapterLoaded, 0, "127.0.0.1:18122", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := startWith(t, true, withAdapters)
			h.srv.SetLive(replicaLive(h, func(r *live.Replica) {
				r.ScrapedAt, r.LoRA = now, &signals.LoRA{Max: 4}
				if r.Address == tc.loaded {
					r.LoRA, r.Saturated = &signals.LoRA{Running: []string{tc.model}, Max: 4}, tc.saturated
					if tc.waiting != "" {
						r.LoRA.Waiting = []string{tc.waiting}
						r.Waiting = 1
					}
					r.QueueLasting = tc.lasting
				}
				if r.Address == tc.full {
					r.LoRA = &signals.LoRA{Running: []string{"a-lora", "b-lora", "c-lora", "d-lora"}, Waiting: []string{tc.model}, Max: 4}
				}
			}))
			for i := range tc.before {
				id := "base-" + strconv.Itoa(i)
				h.run(t, tc.source, chatHeaders(id), reqBody(`{"model":"llama-3.1-8b-instruct","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`))
				waitStreamsClosed(t, h)
				if rec, ok := h.srv.Decisions().Get(id); !ok || rec.Chosen != tc.wantCluster {
					t.Fatalf("base-model request %d went to %v, want %s (the adapter's cluster)", i, rec.Chosen, tc.wantCluster)
				}
			}
			id := "a-" + strings.ReplaceAll(tc.name, " ", "-")
			body := `{"model":"` + tc.model + `","max_tokens":20,"messages":[{"role":"user","content":"` + strings.Repeat("x", 600) + `"}]}`
			resps := h.run(t, tc.source, chatHeaders(id), reqBody(body))
			waitStreamsClosed(t, h)
			rec, ok := h.srv.Decisions().Get(id)
			if !ok {
				t.Fatal("no record")
			}
			if rec.Adapter != tc.model || rec.Model != "llama-3.1-8b-instruct" || rec.RequestedModel != tc.model {
				t.Errorf("record adapter %q model %q requested %q: want %s on llama-3.1-8b-instruct", rec.Adapter, rec.Model, rec.RequestedModel, tc.model)
			}
			if tc.wantCluster != "" && rec.Chosen != tc.wantCluster {
				t.Errorf("chose %s (%s), want %s", rec.Chosen, rec.Redrawn, tc.wantCluster)
			}
			if rec.Replica == nil || rec.Replica.Terms.Adapter != tc.wantTier {
				t.Fatalf("replica decision %+v: want adapter tier %q", rec.Replica, tc.wantTier)
			}
			if tc.wantReplica != "" && rec.Replica.Chosen != tc.wantReplica {
				t.Errorf("replica %s, want %s (adapter loaded)", rec.Replica.Chosen, tc.wantReplica)
			}
			if hv, _ := endpointOf(resps[1]); !strings.HasPrefix(hv, rec.Replica.Chosen) {
				t.Errorf("override host %q, want %s first", hv, rec.Replica.Chosen)
			}
		})
	}
}

// TestAdapterNotServed: an adapter whose clusters the source may not
// reach is a 503 that names the adapter and why each cluster is out; an
// adapter the model list shows carries its base model as parent.
func TestAdapterNotServed(t *testing.T) {
	h := startWith(t, true, func(o *extproc.Options) {
		withAdapters(o)
		o.Config.Models[0].Adapters[0].Clusters = []string{"us-east-vllm"}
	})
	body := `{"model":"sql-lora","max_tokens":20,"messages":[{"role":"user","content":"hi"}]}`
	resps := h.run(t, "edge-eu", chatHeaders("nope"), reqBody(body))
	ir := resps[len(resps)-1].GetImmediateResponse()
	if ir.GetStatus().GetCode() != 503 || !strings.Contains(string(ir.GetBody()), "sql-lora") || !strings.Contains(string(ir.GetBody()), "does not serve the LoRA adapter sql-lora") {
		t.Errorf("answer %d %s: want 503 naming the adapter", ir.GetStatus().GetCode(), ir.GetBody())
	}
	list := h.run(t, "edge-us", reqHeaders(true, ":method", "GET", ":path", "/v1/models/sql-lora"))
	var m struct{ ID, Parent string }
	if err := json.Unmarshal(list[0].GetImmediateResponse().GetBody(), &m); err != nil || m.ID != "sql-lora" || m.Parent != "llama-3.1-8b-instruct" {
		t.Errorf("model sql-lora: %+v (%v): want its parent llama-3.1-8b-instruct", m, err)
	}
	eu := h.run(t, "edge-eu", reqHeaders(true, ":method", "GET", ":path", "/v1/models/sql-lora"))
	if got := eu[0].GetImmediateResponse().GetStatus().GetCode(); got != 404 {
		t.Errorf("edge-eu lists sql-lora (%d): its cluster is out of its regions", got)
	}
}
