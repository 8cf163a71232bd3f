package experiment

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/extproc/extproctest"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/internal/promtest"
	"github.com/ilbproject/ilb/live"
	"github.com/ilbproject/ilb/picker"
	"github.com/ilbproject/ilb/signals"
	"github.com/ilbproject/ilb/sim/workload"
	"github.com/ilbproject/ilb/weights"
)

// TestReplicaPickParity drives the two callers of the replica picker —
// ILB's ext_proc over a real gRPC stream and the routing benchmark's
// host policy ilb — with the same live replicas (random states, ramps,
// saturation and running requests, through the product's signals glue)
// and the same requests (conversations: a session each, prompts too short
// to hash, so the load, the ramps and the session's tie-breaking draw
// decide), and checks that they pick the same replica and list the same
// runner-up, or both find the cluster out. Each request completes before the next: both pickers see
// the same load.
func TestReplicaPickParity(t *testing.T) {
	f := world()
	cfg, err := f.Config(ControllerSettings{Policy: "proportional", CapacityPerReplica: map[string]float64{
		replica0Profile(f): 1000, "llama-3-8b/a100-80gb": 500,
	}})
	if err != nil {
		t.Fatal(err)
	}
	const cluster = 0
	name := f.Clusters[cluster].Name
	cfg.Clusters[cluster].ReplicaPicking.Enabled = true
	now := time.Unix(1_800_000_000, 0)
	// Rand feeds the route decision's uniform only: the picker draws from
	// the session.
	reg := prometheus.NewRegistry()
	srv, err := extproc.New(extproc.Options{Config: cfg, Registry: reg, Rand: func() uint64 { return 0 }, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	client := extproctest.Serve(t, srv)
	// Every request of edge-us goes to the cluster.
	var cells []weights.Cell
	for _, s := range f.Sources {
		cells = append(cells, weights.Cell{Source: s.Name, Model: model, Targets: []weights.Target{{Cluster: name, Weight: weights.Total}}})
	}
	w, err := weights.New("parity", now, cells)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Publish(t.Context(), w); err != nil {
		t.Fatal(err)
	}
	r := &runner{
		cfg: cfg, models: map[string]int{model: 0}, rng: rand.New(rand.NewPCG(1, 2)), addrs: map[string]int{},
		live: make([]live.Cluster, len(f.Clusters)), clusters: make([]*simCluster, len(f.Clusters)),
	}
	for i := range f.Clusters {
		r.clusters[i] = &simCluster{}
	}
	r.clusters[cluster].picker = picker.NewCluster(picker.Options{CacheTokens: cfg.Clusters[cluster].ReplicaPicking.CacheTokensOrDefault()})
	rng := rand.New(rand.NewPCG(3, 4))
	serving := []signals.State{signals.StateReady, signals.StateWarming, signals.StateStale, signals.StateStarting}
	out := []signals.State{signals.StateDraining, signals.StateUnhealthy}
	const rounds, perRound, replicas = 20, 20, 5
	for ri := range replicas {
		r.addrs[fmt.Sprintf("10.0.0.%d:8000", ri)] = ri
	}
	seen := map[string]int{}
	for round := range rounds {
		reps := make([]signals.Replica, replicas)
		pOut := rng.Float64() // some rounds leave one replica, or none
		for ri := range reps {
			st := serving[rng.IntN(len(serving))]
			if rng.Float64() < pOut {
				st = out[rng.IntN(len(out))]
			}
			reps[ri] = signals.Replica{Address: fmt.Sprintf("10.0.0.%d:8000", ri), State: st, Ramp: 1, Saturated: rng.IntN(4) == 0}
			if st == signals.StateWarming {
				reps[ri].Ramp = 0.1 + 0.9*rng.Float64()
			}
			if st == signals.StateReady || st == signals.StateWarming {
				reps[ri].LastScrape, reps[ri].Metrics = now, signals.Metrics{Running: float64(rng.IntN(6))}
			}
		}
		ls := live.FromSignals(signals.NewSnapshot(now, []string{name}, [][]signals.Replica{reps}), config.Default().Controller.Capacity, nil)
		ls.Clusters = map[string]live.Cluster{name: ls.Clusters[name]}
		srv.SetLive(ls)
		r.live[cluster] = ls.Clusters[name]
		for n := range perRound {
			id := fmt.Sprintf("r%d-%d", round, n)
			session := fmt.Sprintf("conversation-%d", rng.IntN(8))
			prompt := strings.Repeat("x", rng.IntN(200))
			resps := extproctest.Send(t, client, "edge-us",
				&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
					Headers: extproctest.Headers(":method", "POST", ":path", "/v1/chat/completions", ":authority", "ilb", header.RequestID, id, header.Session, session),
				}}},
				&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
					Body: []byte(`{"model":"` + model + `","messages":[{"role":"user","content":"` + prompt + `"}]}`), EndOfStream: true,
				}}},
				&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
					Headers: extproctest.Headers(":status", "200", header.ServedCluster, name),
				}}},
			)
			// The request leaves ext_proc's picker when its stream ends,
			// which the server sees after the client: wait for it, or the
			// next pick would see its load there and not in the benchmark.
			streamsClosed(t, reg)
			rec, ok := srv.Decisions().Get(id)
			if r.live[cluster].Excluded != "" { // every replica out: a spill target takes it, no replica of the cluster
				if !ok || rec.Chosen == name || rec.Replica != nil {
					t.Fatalf("%s: the cluster is excluded (%s), yet ext_proc sent the request to %q (replica %+v)", id, r.live[cluster].Excluded, rec.Chosen, rec.Replica)
				}
				seen["excluded"]++
				continue
			}
			if !ok || rec.Chosen != name || rec.Replica == nil || rec.SessionFrom != "header" {
				t.Fatalf("%s: record %+v, %v (answers %v)", id, rec, ok, resps)
			}
			q := &workload.Request{Model: model, Session: session, Prompt: rec.PromptTokens}
			hp := r.ilbPick(cluster, q)
			hp.ticket.FirstToken()
			hp.ticket.Done()
			got, runnerUp := addrOf(r, hp.replica), addrOf(r, hp.alt)
			want, wantRunnerUp := rec.Replica.Chosen, ""
			if rec.Replica.RunnerUp != nil {
				wantRunnerUp = rec.Replica.RunnerUp.Address
			}
			if got != want || runnerUp != wantRunnerUp {
				t.Fatalf("%s (session %s, %d prompt tokens): ext_proc picked %q (runner-up %q, %s); the benchmark %q (runner-up %q)",
					id, session, rec.PromptTokens, want, wantRunnerUp, rec.Replica.Reason+rec.Replica.Skipped, got, runnerUp)
			}
			seen[rec.Replica.Reason+rec.Replica.Skipped]++
		}
	}
	for _, reason := range []string{picker.ReasonLoad, picker.ReasonOnly, "excluded"} {
		if seen[reason] == 0 {
			t.Errorf("no pick for reason %q (seen %v): the comparison proves little", reason, seen)
		}
	}
}

// streamsClosed waits until the server has no ext_proc stream open.
func streamsClosed(t *testing.T, reg prometheus.Gatherer) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if n, ok := promtest.Value(t, reg, "ilb_extproc_streams", nil); ok && n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("ext_proc streams still open 30 s after their requests")
		}
		time.Sleep(time.Millisecond)
	}
}

// addrOf is replica index i's address ("" for -1).
func addrOf(r *runner, i int) string {
	for a, j := range r.addrs {
		if j == i && i >= 0 {
			return a
		}
	}
	return ""
}

// replica0Profile is the profile name of f's first cluster.
func replica0Profile(f Fleet) string { return f.Clusters[0].Profile }
