package extproc_test

import (
	"fmt"
	"strings"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/ilbproject/ilb/decision"
	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/internal/promtest"
	"github.com/ilbproject/ilb/live"
)

// replicaLive is live state giving each demo cluster its configured
// replicas, serving; mod adjusts a replica by address.
func replicaLive(h *harness, mod func(*live.Replica)) *live.State {
	l := &live.State{At: now, Clusters: map[string]live.Cluster{}}
	for _, c := range h.cfg.Clusters {
		var reps []live.Replica
		for _, ep := range c.Endpoints {
			r := live.Replica{Address: ep, Ramp: 1}
			if mod != nil {
				mod(&r)
			}
			if r.Address != "" {
				reps = append(reps, r)
			}
		}
		l.Clusters[c.Name] = live.Cluster{Replicas: reps}
	}
	return l
}

// conversation is the body of turn n of a chat whose messages are long
// enough to fill several 256-byte blocks.
func conversation(id string, n int) string {
	var msgs []string
	for i := range n {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"%s turn %d %s"},{"role":"assistant","content":"answer %d %s"}`, id, i, strings.Repeat("q", 600), i, strings.Repeat("a", 400)))
	}
	return `{"model":"qwen-7b","max_tokens":50,"messages":[` + strings.Join(msgs, ",") + `]}`
}

// chatHeaders are a chat completion's request headers with this
// x-request-id, plus extra.
func chatHeaders(id string, extra ...string) *extprocv3.ProcessingRequest {
	return reqHeaders(false, append([]string{":method", "POST", ":path", "/v1/chat/completions", ":authority", "ilb", header.RequestID, id}, extra...)...)
}

// endpointOf returns the override-host list an answer carries, as the
// header and as envoy.lb dynamic metadata ("" when absent).
func endpointOf(resp *extprocv3.ProcessingResponse) (hdr, meta string) {
	for _, o := range resp.GetRequestBody().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if o.GetHeader().GetKey() == header.DestinationEndpoint {
			hdr = string(o.GetHeader().GetRawValue())
		}
	}
	meta = resp.GetDynamicMetadata().GetFields()[header.LBNamespace].GetStructValue().GetFields()[header.DestinationEndpoint].GetStringValue()
	return hdr, meta
}

// TestReplicaPicking drives ext_proc over a real gRPC stream with
// replica picking on: the answer names the replicas as the override-host
// header and metadata, a conversation's next turn goes back to the
// replica that holds its prefix, a draining replica (absent from the live
// state) is never picked, the record explains the choice and checks the
// served host, and the metrics count it.
func TestReplicaPicking(t *testing.T) {
	type turn struct {
		id       string // conversation
		n        int    // turns so far
		served   string // Envoy's upstream host ("=": the chosen one)
		gone     string // replica absent from the live state
		draining string // replica listed as draining
		wantSame int    // index of an earlier turn whose replica it must get (-1: any)
		wantNot  string // a replica it must not get
	}
	tests := []struct {
		name  string
		turns []turn
	}{
		{"a conversation returns to its replica", []turn{
			{id: "c1", n: 2, served: "=", wantSame: -1},
			{id: "c1", n: 3, served: "=", wantSame: 0},
			{id: "c1", n: 4, served: "=", wantSame: 1},
		}},
		{"a replica that left is not picked, even holding the prefix", []turn{
			{id: "c2", n: 2, served: "=", wantSame: -1},
			{id: "c2", n: 3, served: "=", gone: "@0", wantSame: -1, wantNot: "@0"},
		}},
		{"a draining replica is not picked, even holding the prefix", []turn{
			{id: "c3", n: 2, served: "=", wantSame: -1},
			{id: "c3", n: 3, served: "=", draining: "@0", wantSame: -1, wantNot: "@0"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := startWith(t, true, func(o *extproc.Options) {
				for i := range o.Config.Clusters {
					o.Config.Clusters[i].ReplicaPicking.Enabled = true
				}
			})
			var chosen []string
			for i, tr := range tt.turns {
				gone, draining := tr.gone, tr.draining
				if strings.HasPrefix(gone, "@") {
					gone = chosen[0]
				}
				if strings.HasPrefix(draining, "@") {
					draining = chosen[0]
				}
				h.srv.SetLive(replicaLive(h, func(r *live.Replica) {
					switch r.Address {
					case gone:
						r.Address = ""
					case draining:
						r.Out = "draining"
					}
				}))
				id := fmt.Sprintf("%s-%d", tt.name, i)
				hdr := chatHeaders(id, header.DestinationEndpoint, "10.9.9.9:1")
				resps := h.run(t, "edge-us", hdr, reqBody(conversation(tr.id, tr.n)))
				waitStreamsClosed(t, h) // its load on the replica is settled
				hv, mv := endpointOf(resps[1])
				if hv == "" || hv != mv {
					t.Fatalf("turn %d: override-host header %q and metadata %q: want the same non-empty list", i, hv, mv)
				}
				first := strings.Split(hv, ",")[0]
				chosen = append(chosen, first)
				if first == "10.9.9.9:1" {
					t.Fatalf("turn %d: the client's own x-gateway-destination-endpoint was kept", i)
				}
				if tr.wantSame >= 0 && first != chosen[tr.wantSame] {
					t.Errorf("turn %d went to %s, want %s (the replica holding its prefix)", i, first, chosen[tr.wantSame])
				}
				if tr.wantNot != "" && (first == gone || first == draining) {
					t.Errorf("turn %d went to %s, which left the live state or drains", i, first)
				}
				rec, ok := h.srv.Decisions().Get(id)
				if !ok || rec.Replica == nil || rec.Replica.Chosen != first || rec.Replica.Reason == "" {
					t.Fatalf("turn %d: record %+v: want the replica decision naming %s", i, rec.Replica, first)
				}
				if rec.Replica.RunnerUp != nil && rec.Replica.Lost == "" {
					t.Errorf("turn %d: a runner-up without why it lost: %+v", i, rec.Replica)
				}
				// The same request again, answered: Envoy's response names
				// the host it used, and the record says whether that is
				// the replica ILB chose.
				id2 := id + "-answered"
				h.run(t, "edge-us", chatHeaders(id2), reqBody(conversation(tr.id, tr.n)), respHeaders(":status", "200",
					header.ServedCluster, rec.Chosen, header.WeightsVersion, h.w.Version(), header.UpstreamHost, first))
				waitStreamsClosed(t, h)
				rec2, _ := h.srv.Decisions().Get(id2)
				want := "other"
				if rec2.Replica != nil && rec2.Replica.Chosen == first {
					want = "chosen"
				}
				if rec2.Replica == nil || rec2.Replica.Served != want {
					t.Errorf("turn %d: answered record's replica %+v: want served %q (upstream host %s)", i, rec2.Replica, want, first)
				}
			}
			text := string(promtest.Exposition(t, h.reg))
			for _, want := range []string{`ilb_extproc_replica_served_total{cluster=`, `ilb_extproc_replica_picks_total{cluster=`, `ilb_extproc_replica_index_bytes{cluster=`, `ilb_extproc_replica_cached_tokens_total{cluster=`} {
				if !strings.Contains(text, want) {
					t.Errorf("metrics lack %s", want)
				}
			}
		})
	}
}

// TestReplicaPickingWithoutLiveState: with no live replica state ILB
// leaves the replica to Envoy and says so; clusters without replica
// picking never get the header.
func TestReplicaPickingWithoutLiveState(t *testing.T) {
	for _, tc := range []struct {
		name    string
		enabled bool
		skipped bool
	}{
		{"picking on, no live state: skipped", true, true},
		{"picking off: no replica decision", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startWith(t, true, func(o *extproc.Options) {
				for i := range o.Config.Clusters {
					o.Config.Clusters[i].ReplicaPicking.Enabled = tc.enabled
				}
			})
			resps := h.run(t, "edge-us", chatHeaders("r1"), reqBody(conversation("x", 2)))
			if hv, mv := endpointOf(resps[1]); hv != "" || mv != "" {
				t.Errorf("override-host %q / %q without a replica decision", hv, mv)
			}
			rec, _ := h.srv.Decisions().Get("r1")
			switch {
			case tc.skipped && (rec.Replica == nil || rec.Replica.Skipped == ""):
				t.Errorf("record replica %+v: want skipped with a reason", rec.Replica)
			case !tc.skipped && rec.Replica != nil:
				t.Errorf("record replica %+v: want none", rec.Replica)
			}
		})
	}
}

// TestReplicaPickerForgetsRemovedReplicas: a replica no longer listed
// for its cluster in the live state is forgotten (its index and load),
// so the index holds only the cluster's current members however many
// come and go; one listed as draining is kept.
func TestReplicaPickerForgetsRemovedReplicas(t *testing.T) {
	h := startWith(t, true, func(o *extproc.Options) {
		for i := range o.Config.Clusters {
			o.Config.Clusters[i].ReplicaPicking.Enabled = true
		}
	})
	blocks := func() float64 {
		v, _ := promtest.Value(t, h.reg, "ilb_extproc_replica_index_blocks", map[string]string{"cluster": "us-east-vllm"})
		return v
	}
	h.srv.SetLive(replicaLive(h, nil))
	for i := range 6 {
		h.run(t, "edge-us", chatHeaders(fmt.Sprint("f", i)), reqBody(conversation(fmt.Sprint("conv", i), 3)))
	}
	all := blocks()
	if all == 0 {
		t.Fatal("no block indexed for us-east-vllm")
	}
	for _, tc := range []struct {
		name string
		mod  func(*live.Replica)
		less bool
	}{
		{"a draining replica is kept", func(r *live.Replica) {
			if r.Address == "127.0.0.1:18101" {
				r.Out = "draining"
			}
		}, false},
		{"a replica that left is forgotten", func(r *live.Replica) {
			if r.Address == "127.0.0.1:18101" {
				r.Address = ""
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h.srv.SetLive(replicaLive(h, tc.mod))
			if got := blocks(); (got < all) != tc.less {
				t.Errorf("index blocks %v after the change, %v before: want fewer %v", got, all, tc.less)
			}
		})
	}
	// A replica listed unhealthy is forgotten too: it may come back
	// restarted at the same address, its engine's cache empty.
	t.Run("an unhealthy replica is forgotten", func(t *testing.T) {
		h.srv.SetLive(replicaLive(h, nil))
		victim := ""
		for i := 0; victim == "" && i < 50; i++ {
			id := fmt.Sprint("u", i)
			h.run(t, "edge-us", chatHeaders(id), reqBody(conversation(id, 3)))
			if rec, ok := h.srv.Decisions().Get(id); ok && rec.Chosen == "us-east-vllm" && rec.Replica != nil {
				victim = rec.Replica.Chosen
			}
		}
		if victim == "" {
			t.Fatal("no request of 50 went to us-east-vllm")
		}
		before := blocks()
		h.srv.SetLive(replicaLive(h, func(r *live.Replica) {
			if r.Address == victim {
				r.Out = live.OutUnhealthy
			}
		}))
		if got := blocks(); got >= before {
			t.Errorf("index blocks %v after %s turned unhealthy, %v before: want it forgotten", got, victim, before)
		}
	})
}

// TestReplicaPickingBySession: a request ILB decides on headers alone
// (an endpoint whose body it does not parse, the model named in
// x-ilb-model) has no prompt blocks; its session key stands for its
// prefix: the session's next request goes back to the replica that served
// it, credited with the whole blocks of the last request's length
// (Content-Length ÷ 4), and
// the record says the credit came from the session.
func TestReplicaPickingBySession(t *testing.T) {
	send := func(h *harness, id, session string, length int) decision.Record {
		t.Helper()
		kv := []string{
			":method", "POST", ":path", "/v1/messages", ":authority", "ilb", header.RequestID, id,
			header.Model, "qwen-7b", "content-length", fmt.Sprint(length),
		}
		if session != "" {
			kv = append(kv, header.Session, session)
		}
		// The response's headers end the request's prefill (its first
		// token): its prompt no longer counts as work queued there.
		resps := h.run(t, "edge-us", reqHeaders(false, kv...), respHeaders(":status", "200"))
		waitStreamsClosed(t, h) // its decode work on the replica is settled
		var hv string
		for _, o := range resps[0].GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
			if o.GetHeader().GetKey() == header.DestinationEndpoint {
				hv = string(o.GetHeader().GetRawValue())
			}
		}
		rec, ok := h.srv.Decisions().Get(id)
		if !ok || rec.Replica == nil || rec.Replica.Chosen == "" || !strings.HasPrefix(hv, rec.Replica.Chosen+",") {
			t.Fatalf("%s: override-host %q, record %+v: want a replica decision, chosen first", id, hv, rec.Replica)
		}
		return rec
	}
	for _, tc := range []struct {
		name    string
		session string
		lengths []int
		// per request after the first: the credited tokens (0: none,
		// reason load)
		credited []int
	}{
		{"a session returns to its replica, credited with its last request", "agent-1", []int{8000, 12000, 16000}, []int{31 * 64, 46 * 64}}, // whole blocks of 2,000 and 3,000 tokens
		{"the credit is at most the request's own length less a block", "agent-2", []int{40000, 8000}, []int{2000 - 64}},
		{"no session: load alone", "", []int{8000, 12000}, []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A server per case: no other case's load.
			h := startWith(t, true, func(o *extproc.Options) {
				for i := range o.Config.Clusters {
					o.Config.Clusters[i].ReplicaPicking.Enabled = true
				}
			})
			h.srv.SetLive(replicaLive(h, nil))
			first := send(h, tc.name+"-0", tc.session, tc.lengths[0])
			for i, n := range tc.lengths[1:] {
				rec := send(h, fmt.Sprintf("%s-%d", tc.name, i+1), tc.session, n)
				rd, want := rec.Replica, tc.credited[i]
				if rd.Terms.Cached != want || rd.Terms.Session != (want > 0) {
					t.Errorf("request %d: terms %+v, want %d tokens credited by the session", i+1, rd.Terms, want)
				}
				if want > 0 && (rd.Chosen != first.Replica.Chosen || rd.Reason != "session") {
					t.Errorf("request %d: chose %s (%s), want the session's replica %s, reason session", i+1, rd.Chosen, rd.Reason, first.Replica.Chosen)
				}
				if want == 0 && rd.Reason == "session" {
					t.Errorf("request %d: reason session without a session key", i+1)
				}
			}
			want := 0
			for _, c := range tc.credited {
				if c > 0 {
					want++
				}
			}
			if v, _ := promtest.Value(t, h.reg, "ilb_extproc_replica_picks_total", map[string]string{"cluster": first.Chosen, "reason": "session"}); v != float64(want) {
				t.Errorf("ilb_extproc_replica_picks_total{cluster=%q,reason=\"session\"} = %v, want %d", first.Chosen, v, want)
			}
		})
	}
}

// TestReplicaPickingCountsEngineLoad: the engines' running requests at
// their last scrape are the replicas' decode load (Envoy closes ext_proc's
// stream at the response headers, so ILB's own count ends at the first
// token): a request with no cache hit goes to the replica whose engine
// runs fewer, and the record shows both replicas' decode work.
func TestReplicaPickingCountsEngineLoad(t *testing.T) {
	h := startWith(t, true, func(o *extproc.Options) {
		for i := range o.Config.Clusters {
			o.Config.Clusters[i].ReplicaPicking.Enabled = true
		}
	})
	busy := "127.0.0.1:18101"
	for i := range 50 {
		h.srv.SetLive(replicaLive(h, func(r *live.Replica) {
			r.ScrapedAt = now
			if r.Address == busy {
				r.Running = 40
			}
		}))
		id := fmt.Sprint("load", i)
		h.run(t, "edge-us", chatHeaders(id), reqBody(conversation(id, 2)))
		waitStreamsClosed(t, h)
		rec, _ := h.srv.Decisions().Get(id)
		if rec.Chosen != "us-east-vllm" {
			continue // another cluster
		}
		rd := rec.Replica
		if rd == nil || rd.Chosen == busy || rd.RunnerUp == nil || rd.RunnerUp.Address != busy {
			t.Fatalf("request %d: replica decision %+v: want the idle replica, %s the runner-up", i, rd, busy)
		}
		// 40 running × the default 250 output tokens × output cost 4 over prompt cost 1.
		if want := 40 * 250 * 4.0; rd.RunnerUp.Decode < want {
			t.Errorf("request %d: runner-up decode work %v, want at least %v", i, rd.RunnerUp.Decode, want)
		}
		return
	}
	t.Fatal("no request of 50 went to us-east-vllm")
}
