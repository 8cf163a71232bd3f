package test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/decision"
	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/sim/engine"
)

// turnBody is turn n of a chat whose history grows by about 2 KiB a turn.
func turnBody(conv string, n int) string {
	var msgs []string
	for i := range n {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":"%s question %d %s"},{"role":"assistant","content":"answer %d %s"}`,
			conv, i, strings.Repeat("q", 1200), i, strings.Repeat("a", 800)))
	}
	return `{"model":"llama-3.1-8b-instruct","max_tokens":8,"messages":[` + strings.Join(msgs, ",") + `]}`
}

// replicaOf waits for the decision record of id to hold the response and
// returns its replica decision and the host Envoy served from.
func replicaOf(t *testing.T, x *extproc.Server, id string) (*decision.ReplicaDecision, string) {
	t.Helper()
	var rec decision.Record
	waitUntil(t, "the decision record of "+id+" holds its response", 5*time.Second, func() bool {
		var ok bool
		rec, ok = x.Decisions().Get(id)
		return ok && rec.Complete
	})
	if rec.Replica == nil {
		t.Fatalf("%s: no replica decision in %+v", id, rec)
	}
	return rec.Replica, rec.UpstreamHost
}

// TestConversationStaysOnItsReplica runs the demo stack (envoysim, ILB,
// simulated engines) with edge-us served by us-east-vllm alone, whose
// replicas ILB picks: a conversation's turns land on one replica, every
// record names the host Envoy served (the override-host header reached
// envoysim's override_host policy); when that replica stops, the next
// turns go to the other one as soon as ILB's signals see it gone (Envoy
// retries the next listed host meanwhile: no request fails).
func TestConversationStaysOnItsReplica(t *testing.T) {
	s := startWorld(t, nil, func(c *config.Config) {
		src := c.Sources[0] // edge-us
		src.AllowedRegions = []string{"us-east"}
		c.Sources[0] = src
	})
	us, _ := s.Envoy("edge-us")
	waitUntil(t, "signals see both us-east-vllm replicas ready", 10*time.Second, func() bool {
		return s.App.Signals.Snapshot().Clusters["us-east-vllm"].Ready == 2
	})
	var holder string
	for n := 1; n <= 6; n++ {
		r, body := do(t, http.MethodPost, us.URL+"/v1/chat/completions", turnBody("conv-a", n), nil)
		if r.StatusCode != http.StatusOK {
			t.Fatalf("turn %d: %d %s", n, r.StatusCode, body)
		}
		rd, served := replicaOf(t, s.App.ExtProc, r.Header.Get(header.RequestID))
		if served != rd.Chosen || rd.Served != "chosen" {
			t.Errorf("turn %d: ILB chose %s, Envoy served %s (record says %q)", n, rd.Chosen, served, rd.Served)
		}
		if n == 1 {
			holder = rd.Chosen
			continue
		}
		if rd.Chosen != holder || rd.Reason != "prefix" || rd.Terms.Cached == 0 {
			t.Errorf("turn %d: replica %s (%s, %d cached tokens), want %s, which holds the conversation", n, rd.Chosen, rd.Reason, rd.Terms.Cached, holder)
		}
	}

	if err := s.Fleet.Stop(holder); err != nil {
		t.Fatal(err)
	}
	for n := 7; n <= 10; n++ {
		r, body := do(t, http.MethodPost, us.URL+"/v1/chat/completions", turnBody("conv-a", n), nil)
		if r.StatusCode != http.StatusOK {
			t.Errorf("turn %d after the holder stopped: %d %s", n, r.StatusCode, body)
			continue
		}
		rd, served := replicaOf(t, s.App.ExtProc, r.Header.Get(header.RequestID))
		if served == holder {
			t.Errorf("turn %d: served by the stopped replica %s", n, holder)
		}
		if rd.Chosen == holder && served != rd.Hosts[min(1, len(rd.Hosts)-1)] {
			t.Errorf("turn %d: ILB still chose the stopped %s and Envoy did not take the next listed host (%v), served %s", n, holder, rd.Hosts, served)
		}
	}
	waitUntil(t, "ILB stops picking the stopped replica", 5*time.Second, func() bool {
		r, _ := do(t, http.MethodPost, us.URL+"/v1/chat/completions", turnBody("conv-a", 10), nil)
		rd, _ := replicaOf(t, s.App.ExtProc, r.Header.Get(header.RequestID))
		return r.StatusCode == http.StatusOK && rd.Chosen != holder
	})
}

// TestHotPrefixSpreadsUnderLoad: requests that share one long prompt
// prefix go to the replica holding it while its queue is short, and
// spread to the other replica once ILB's own queue there outweighs the
// prefill they would repeat (engines slow enough that requests pile up).
func TestHotPrefixSpreadsUnderLoad(t *testing.T) {
	timing := &engine.FixedTiming{MaxRunning: 4, PrefillPerToken: 200 * time.Microsecond, InterTokenLatency: 20 * time.Millisecond}
	s := startWorld(t, timing, func(c *config.Config) {
		src := c.Sources[0]
		src.AllowedRegions = []string{"us-east"}
		c.Sources[0] = src
	})
	us, _ := s.Envoy("edge-us")
	waitUntil(t, "signals see both us-east-vllm replicas ready", 10*time.Second, func() bool {
		return s.App.Signals.Snapshot().Clusters["us-east-vllm"].Ready == 2
	})
	hot := turnBody("hot-document", 2) // ~4 KiB: ~1,000 tokens, 16 blocks
	r, body := do(t, http.MethodPost, us.URL+"/v1/chat/completions", hot, nil)
	if r.StatusCode != http.StatusOK {
		t.Fatalf("first request: %d %s", r.StatusCode, body)
	}
	holder, _ := replicaOf(t, s.App.ExtProc, r.Header.Get(header.RequestID))

	const n = 40
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, body := doWithin(t, 60*time.Second, http.MethodPost, us.URL+"/v1/chat/completions", hot, nil)
			if r.StatusCode != http.StatusOK {
				t.Errorf("request %d: %d %s", i, r.StatusCode, body)
			}
			ids[i] = r.Header.Get(header.RequestID)
		})
	}
	wg.Wait()
	per := map[string]int{}
	for _, id := range ids {
		rd, served := replicaOf(t, s.App.ExtProc, id)
		per[served]++
		if rd.Chosen != served {
			t.Errorf("%s: chose %s, served by %s", id, rd.Chosen, served)
		}
	}
	t.Logf("%d concurrent requests of one prefix, served: %v (holder %s)", n, per, holder.Chosen)
	if per[holder.Chosen] == n || per[holder.Chosen] < n/4 {
		t.Errorf("%d concurrent requests of one prefix went %v: want most on the holder %s and the rest spread once its queue outweighs the prefix", n, per, holder.Chosen)
	}
}
