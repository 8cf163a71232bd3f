package experiment

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"

	"github.com/ilbproject/ilb/decision"
	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/extproc/extproctest"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/live"
	"github.com/ilbproject/ilb/route"
	"github.com/ilbproject/ilb/signals"
	"github.com/ilbproject/ilb/weights"
)

// queue is an extproc.Options.Rand that returns the values the test
// queued, in order.
type queue struct {
	mu   sync.Mutex
	vals []uint64
}

func (q *queue) push(v ...uint64) { q.mu.Lock(); q.vals = append(q.vals, v...); q.mu.Unlock() }

func (q *queue) next() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.vals) == 0 {
		panic("parity: ext_proc drew more random values than queued")
	}
	v := q.vals[0]
	q.vals = q.vals[1:]
	return v
}

// TestDecisionParity drives the two callers of the route decision — ILB's
// ext_proc over a real gRPC stream and the routing benchmark's table —
// with the same weights, live engine state, priorities and draws, and
// checks that they refuse or route every request alike. Weights, shed
// plans and live states are random, so every branch (503, planned 429
// confirmed or waived, sheddable 429, redraw, steering) is reached.
func TestDecisionParity(t *testing.T) {
	f := world()
	cfg, err := f.Config(ControllerSettings{Policy: "proportional", CapacityPerReplica: map[string]float64{
		"llama-3-8b/h100": 1000, "llama-3-8b/a100-80gb": 500,
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range cfg.Sources {
		cfg.Sources[i].TrustPriorityHeader = true
	}
	now := time.Unix(1_800_000_000, 0)
	q := &queue{}
	srv, err := extproc.New(extproc.Options{Config: cfg, Rand: q.next, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	client := extproctest.Serve(t, srv)

	sources := index(len(f.Sources), func(i int) string { return f.Sources[i].Name })
	models := index(len(f.Models), func(i int) string { return f.Models[i] })
	clusters := index(len(f.Clusters), func(i int) string { return f.Clusters[i].Name })
	var names []string
	for _, c := range f.Clusters {
		names = append(names, c.Name)
	}
	rng := rand.New(rand.NewPCG(8, 11))
	seen := map[string]int{}
	const versions, perVersion = 100, 25
	for v := range versions {
		w := randomWeights(t, f, rng, now)
		if err := srv.Publish(t.Context(), w); err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
		tab := newTable(cfg, w, sources, models, clusters)
		// The signals monitor's snapshot, random; each side takes it
		// through its own glue: app's hook (live.FromSignals) for
		// ext_proc, the runner's signals round (observe) for the
		// benchmark.
		snap := randomSnapshot(f, rng, now)
		r := &runner{clusterNames: names, live: make([]live.Cluster, len(f.Clusters)), clusters: make([]*simCluster, len(f.Clusters)), slo: cfg.Controller.Capacity}
		r.observe(snap)
		el := live.FromSignals(snap, cfg.Controller.Capacity, nil)
		srv.SetLive(el)
		for n := range perVersion {
			si := rng.IntN(len(f.Sources))
			prio := weights.Priorities[rng.IntN(len(weights.Priorities))]
			draw, ubits := rng.Uint64(), rng.Uint64()
			u := float64(ubits>>11) / (1 << 53) // as extproc turns a draw into [0, 1)
			q.push(draw, ubits)
			id := fmt.Sprintf("v%d-r%d", v, n)
			// Prompts from a few tokens to tens of thousands, so that some
			// would miss the TTFT target by their prefill alone.
			content := strings.Repeat("x", rng.IntN(4)*rng.IntN(60000)+2)
			resps := extproctest.Send(t, client, f.Sources[si].Name,
				&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
					Headers: extproctest.Headers(":method", "POST", ":path", "/v1/chat/completions", ":authority", "ilb", header.RequestID, id, header.Priority, prio.String()),
				}}},
				&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{
					Body: []byte(`{"model":"` + model + `","messages":[{"role":"user","content":"` + content + `"}]}`), EndOfStream: true,
				}}},
			)
			rec, ok := srv.Decisions().Get(id)
			if !ok {
				t.Fatalf("%s: no decision record (answers %v)", id, resps)
			}
			// The request's cost is ext_proc's estimate (recorded): the
			// benchmark's comes from the workload's prompt count, which
			// this request does not have.
			req := route.Request{Priority: prio, Draw: draw, Uniform: u, Cost: rec.TokenCost, Prompt: float64(rec.PromptTokens), Target: r.slo.TTFTTarget.Std().Seconds()}
			ci, out, _, _ := tab.route(cellKey{si, 0}, req, r.live, make([]int, len(f.Clusters)), make([]float64, len(f.Clusters)), make([]float64, len(f.Clusters)), make([]float64, len(f.Clusters)), true, nil, "", time.Time{})
			got := outcomeOf(rec)
			var want string
			switch out {
			case routed:
				want = "routed to " + f.Clusters[ci].Name
			case shedPlanned:
				want = "429 shed"
			case shedSat:
				want = "429 overloaded"
			case noCapacity:
				want = "503 no_capacity"
			default:
				want = fmt.Sprint("outcome ", out)
			}
			if got != want {
				t.Fatalf("%s (source %s, %s, draw %d, u %.3f): ext_proc %s; benchmark %s", id, f.Sources[si].Name, prio, draw, u, got, want)
			}
			branch := rec.Reason
			if strings.Contains(rec.Redrawn, "queued requests per running one") {
				branch = "graded"
			}
			seen[strings.Fields(want)[0]+" "+branch]++
		}
		if len(q.vals) != 0 {
			t.Fatalf("version %d: %d random values left: ext_proc drew fewer than the benchmark", v, len(q.vals))
		}
	}
	// Every branch of the decision was taken, or the comparison proves little.
	for _, b := range []string{"routed weighted", "routed redrawn", "routed balanced", "routed within_target", "routed graded", "429 shed", "429 overloaded", "503 no_capacity"} {
		if seen[b] == 0 {
			t.Errorf("no request took the branch %q (seen %v)", b, seen)
		}
	}
}

// randomSnapshot is a signals snapshot of f's clusters at now: each
// cluster has up to four replicas in random states with random engine
// metrics, and in some rounds every replica of a cluster is out or
// saturated, so that every branch of the decision is reached. No engine
// reports a first-token rate: the wait of a queue the engines report is
// then the replicas' rate at their TTFT (live.Cluster.Signal), and what
// ext_proc's own requests in flight add to it is tested in extproc.
func randomSnapshot(f Fleet, rng *rand.Rand, now time.Time) *signals.Snapshot {
	states := []signals.State{signals.StateReady, signals.StateWarming, signals.StateStale, signals.StateStarting, signals.StateDraining, signals.StateUnhealthy}
	pOut, pSaturated := rng.Float64(), rng.Float64()
	names := make([]string, len(f.Clusters))
	reps := make([][]signals.Replica, len(f.Clusters))
	for ci, c := range f.Clusters {
		names[ci] = c.Name
		out := rng.Float64() < pOut
		for j := range rng.IntN(4) + 1 {
			st := states[rng.IntN(4)]
			if out {
				st = states[4+rng.IntN(2)]
			}
			rep := signals.Replica{Address: fmt.Sprintf("10.%d.0.%d:8000", ci, j), State: st, Ramp: 1, Saturated: rng.Float64() < pSaturated}
			if st == signals.StateWarming {
				rep.Ramp = 0.1 + 0.9*rng.Float64()
			}
			if st != signals.StateStarting && st != signals.StateStale {
				rep.LastScrape = now
				rep.Metrics = signals.Metrics{
					Waiting: float64(rng.IntN(20)), Running: float64(rng.IntN(8)),
					TTFTMeanSeconds: 2 * rng.Float64(), TTFTMeanKnown: rng.Float64() < 0.8,
					// Some intervals without a first token (the
					// replicas' rate predicts then), some with slow ones
					// (overloaded in the SLO's terms when requests wait).
					TTFTKnown: rng.Float64() < 0.8, FirstTokensPerSecond: float64(rng.IntN(3)) * 5,
				}
				rep.Metrics.SlowFirstTokensPerSecond = rep.Metrics.FirstTokensPerSecond * float64(rng.IntN(2)) * rng.Float64()
				// Prompt tokens per first token from 0 to 4,000: a
				// prefill time per token measured, or unknown.
				rep.Metrics.PromptTokensPerSecond, rep.Metrics.RatesKnown = rep.Metrics.FirstTokensPerSecond*float64(rng.IntN(4000)), true
			}
			reps[ci] = append(reps[ci], rep)
		}
	}
	return signals.NewSnapshot(now, names, reps)
}

// outcomeOf is a decision record in the words of the test.
func outcomeOf(rec decision.Record) string {
	switch rec.Status {
	case 0, 200:
		return "routed to " + rec.Chosen
	case 429, 503:
		return fmt.Sprintf("%d %s", rec.Status, rec.Reason)
	}
	return fmt.Sprintf("status %d reason %s", rec.Status, rec.Reason)
}

// randomWeights is a weights version with random targets and shed plans
// for every cell of f.
func randomWeights(t *testing.T, f Fleet, rng *rand.Rand, now time.Time) *weights.Weights {
	t.Helper()
	var cells []weights.Cell
	for _, s := range f.Sources {
		for _, m := range f.Models {
			c := weights.Cell{Source: s.Name, Model: m}
			var picked []string
			for _, cl := range f.Clusters {
				if rng.Float64() < 0.5 {
					picked = append(picked, cl.Name)
				}
			}
			// Random weights summing to weights.Total, each at least 1.
			left := uint32(weights.Total)
			for i, name := range picked {
				wt := left - uint32(len(picked)-1-i)
				if i < len(picked)-1 {
					wt = 1 + uint32(rng.IntN(int(wt)))
				}
				c.Targets = append(c.Targets, weights.Target{Cluster: name, Weight: wt})
				left -= wt
			}
			if rng.Float64() < 0.5 {
				for _, p := range weights.Priorities {
					c.Shed[p] = rng.Float64()
				}
			}
			cells = append(cells, c)
		}
	}
	w, err := weights.New("test", now, cells)
	if err != nil {
		t.Fatal(err)
	}
	return w
}
