package capacity_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/capacity"
)

var t0 = time.Unix(1_800_000_000, 0)

func settings() capacity.Settings {
	return capacity.Settings{SaturationQueue: 0.5, SaturationKV: 0.95, TTFTTarget: time.Second, TTFTQuantile: 0.99}
}

// obs is one second of a 2-replica cluster: x token-cost/s per replica
// (all of it prompt tokens at cost 1), with waiting and running summed.
func obs(i int, x, waiting, running float64) capacity.Observation {
	return capacity.Observation{At: t0.Add(time.Duration(i) * time.Second), Replicas: 2, Waiting: waiting, Running: running, PromptTokensPerSecond: 2 * x}
}

// quarter is o observed at the i-th scrape 250 ms apart.
func quarter(i int, o capacity.Observation) capacity.Observation {
	o.At = t0.Add(time.Duration(i) * 250 * time.Millisecond)
	return o
}

// withTTFT adds n first tokens a second, slow of them over the target.
func withTTFT(o capacity.Observation, n, slow float64) capacity.Observation {
	o.FirstTokensPerSecond, o.SlowFirstTokensPerSecond, o.TTFTKnown = n, slow, true
	return o
}

type bounds struct{ lo, hi float64 }

func (b bounds) has(v float64) bool { return v >= b.lo && v <= b.hi }

func TestEstimate(t *testing.T) {
	const mu = 3000.0 // the engine's real throughput at saturation
	near := func(v float64) bounds { return bounds{0.97 * v, 1.03 * v} }
	exactly := func(v float64) bounds { return bounds{v, v} }
	tests := []struct {
		name    string
		prior   float64
		seconds int
		obs     func(i int) capacity.Observation
		c, sat  bounds // PerReplica and Saturation at the end
		from    string
	}{
		{"prior 3x too high, queued: both fall to the throughput", 3 * mu, 300, func(i int) capacity.Observation { return obs(i, mu, 40, 20) }, near(mu), near(mu), capacity.FromOverload},
		{"prior 3x too low, queued: saturation rises, the plan does not", mu / 3, 300, func(i int) capacity.Observation { return obs(i, mu, 40, 20) }, exactly(mu / 3), near(mu), capacity.FromPrior},
		// A fleet starting (or a cluster added): its first second served
		// a tenth of what it then serves, queued from the start. Its
		// sustained throughput is the mean of what it served so far,
		// not the first second weighted as a whole minute.
		{"a ramp from idle that queues at once learns what it serves, not the ramp", 1.2 * mu, 300, func(i int) capacity.Observation {
			if i == 0 {
				return obs(i, mu/10, 0, 2)
			}
			return obs(i, mu, 40, 20)
		}, bounds{0.95 * mu, 1.03 * mu}, near(mu), capacity.FromOverload},
		{"KV full counts as a queue", 3 * mu, 300, func(i int) capacity.Observation {
			o := obs(i, mu, 0, 20)
			o.KVUsage, o.KVKnown = 0.97, true
			return o
		}, near(mu), near(mu), capacity.FromOverload},
		{"calm and fast: raised to what it served", 1000, 300, func(i int) capacity.Observation { return withTTFT(obs(i, 1200, 0, 10), 10, 0) }, bounds{1190, 1200}, near(1200), capacity.FromHeadroom},
		{"lumpy counters do not ratchet the estimate up", 700, 1800, func(i int) capacity.Observation {
			// Mean 1200, but a second's count is 0, 600, 1200, 1800 or 2400
			// in a pseudo-random order: what prompt tokens counted at the
			// first token look like.
			return withTTFT(obs(i, float64((i*7919)%5)*600, 0, 10), 10, 0)
		}, bounds{750, 1200}, bounds{750, 1200}, capacity.FromHeadroom},
		{"slow first tokens with nothing waiting are prefill, not overload", 3000, 300, func(i int) capacity.Observation { return withTTFT(obs(i, 1200, 0, 10), 10, 1) }, exactly(3000), exactly(3000), capacity.FromPrior},
		// 2 waiting per replica, a request costs 1200 × 2 / 10 = 240:
		// a backlog of 480 per replica, served within the 5 s drain time
		// at 96 a second, leaves 1104 for the plan.
		{"slow first tokens while requests wait: lowered to served less the backlog's drain", 3000, 300, func(i int) capacity.Observation { return withTTFT(obs(i, 1200, 4, 20), 10, 1) }, near(1104), near(1200), capacity.FromOverload},
		// Busy for 5 s at mu, then 5 s at a fifth of it: the window's mean
		// is 0.6 mu, what the engines serve at their limit is mu.
		{"bursty queues: saturation is what the busy intervals served", 3 * mu, 1200, func(i int) capacity.Observation {
			if i%10 < 5 {
				return obs(i, mu, 40, 20)
			}
			return obs(i, mu/5, 0, 2)
		}, bounds{0.5 * mu, 0.7 * mu}, near(mu), capacity.FromOverload},
		// 4 sequences per replica, 2 of them waiting: "saturated" by
		// saturation_queue 0.5, every first token within the target.
		{"a long queue with first tokens within the target is not overload", 3000, 300, func(i int) capacity.Observation { return withTTFT(obs(i, 1200, 4, 8), 10, 0) }, exactly(3000), near(1200), capacity.FromPrior},
		{"a long queue with first tokens within the target is calm: headroom", 1000, 300, func(i int) capacity.Observation { return withTTFT(obs(i, 1200, 4, 8), 10, 0) }, bounds{1190, 1200}, near(1200), capacity.FromHeadroom},
		{"the same queue without a TTFT histogram is overload", 3000, 300, func(i int) capacity.Observation { return obs(i, 1200, 4, 8) }, near(1200), near(1200), capacity.FromOverload},
		{"one request waiting per replica at max_num_seqs is busy", 3 * mu, 300, func(i int) capacity.Observation { return obs(i, mu, 4, 512) }, exactly(3 * mu), near(mu), capacity.FromPrior},
		{"p99 within the target is headroom", 1000, 300, func(i int) capacity.Observation {
			return withTTFT(obs(i, 1200, 0, 10), 10, float64(i%200/199)) // one slow first token in 200
		}, bounds{1190, 1200}, near(1200), capacity.FromHeadroom},
		// Two requests wait per replica: the engines are at their limit,
		// so what they serve is their saturation throughput.
		{"too few first tokens to judge: no TTFT evidence, the queue measures saturation", 3000, 300, func(i int) capacity.Observation { return withTTFT(obs(i, 1200, 4, 20), 0.5, 0.5) }, exactly(3000), near(1200), capacity.FromPrior},
		{"headroom never lowers", 4000, 300, func(i int) capacity.Observation { return obs(i, 1200, 0, 10) }, exactly(4000), exactly(4000), capacity.FromPrior},
		{"a quiet cluster is not a slow one", mu, 300, func(i int) capacity.Observation { return obs(i, 10, 0, 1) }, exactly(mu), exactly(mu), capacity.FromPrior},
		{"a queue one interval in two is no saturation", 3 * mu, 300, func(i int) capacity.Observation { return obs(i, mu, float64(40*(i%2)), 20) }, exactly(3 * mu), exactly(3 * mu), capacity.FromPrior},
		// Scrapes every 250 ms: a queue lasts when seen at every scrape
		// over LastingFor (four of them), whatever the interval.
		{"a queue at every 250 ms scrape is saturation", 3 * mu, 1200, func(i int) capacity.Observation { return quarter(i, obs(0, mu, 40, 20)) }, near(mu), near(mu), capacity.FromOverload},
		{"a queue at three 250 ms scrapes in four is no saturation", 3 * mu, 1200, func(i int) capacity.Observation { return quarter(i, obs(0, mu, float64(40*min(i%4, 1)), 20)) }, exactly(3 * mu), exactly(3 * mu), capacity.FromPrior},
		{"bounded rate: 30 s of evidence moves at most 2^0.5", 3 * mu, 30, func(i int) capacity.Observation { return obs(i, mu/10, 40, 20) }, bounds{3 * mu / math.Sqrt2 * 0.999, 3 * mu}, bounds{3 * mu / math.Sqrt2 * 0.999, 3 * mu}, capacity.FromOverload},
		{"a lying engine stays within 10x the prior", mu, 3600, func(i int) capacity.Observation { return obs(i, 1e12, 40, 20) }, exactly(mu), exactly(10 * mu), capacity.FromPrior},
		{"a stalled engine stays above a tenth of the prior", mu, 3600, func(i int) capacity.Observation { return obs(i, 0, 40, 20) }, exactly(mu / 10), exactly(mu / 10), capacity.FromOverload},
		{"NaN and Inf are no evidence", mu, 300, func(i int) capacity.Observation {
			o := obs(i, mu*2, 40, 20)
			if i%2 == 0 {
				o.PromptTokensPerSecond = math.NaN()
			} else {
				o.Waiting = math.Inf(1)
			}
			return o
		}, exactly(mu), exactly(mu), capacity.FromPrior},
		{"no replica is no evidence", mu, 300, func(i int) capacity.Observation { o := obs(i, 2*mu, 40, 20); o.Replicas = 0; return o }, exactly(mu), exactly(mu), capacity.FromPrior},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := capacity.New(settings(), []capacity.Cluster{{Name: "c", Prior: tt.prior, PromptCost: 1, OutputCost: 4}})
			if err != nil {
				t.Fatal(err)
			}
			for i := range tt.seconds + 1 {
				e.Observe("c", tt.obs(i))
			}
			est := e.Estimates()[0]
			if !tt.c.has(est.PerReplica) || !tt.sat.has(est.Saturation) || est.From != tt.from {
				t.Errorf("capacity %.1f, saturation %.1f, from %s; want %v, %v, from %s (%+v)", est.PerReplica, est.Saturation, est.From, tt.c, tt.sat, tt.from, est)
			}
			if est.Prior != tt.prior {
				t.Errorf("prior %v; want %v", est.Prior, tt.prior)
			}
		})
	}
}

func TestEstimateOutputCost(t *testing.T) {
	e, err := capacity.New(settings(), []capacity.Cluster{{Name: "c", Prior: 600, PromptCost: 1, OutputCost: 4}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 601 {
		e.Observe("c", capacity.Observation{At: t0.Add(time.Duration(i) * time.Second), Replicas: 4, Waiting: 10, Running: 8, PromptTokensPerSecond: 400, GenerationTokensPerSecond: 100})
	}
	// (400 × 1 + 100 × 4) / 4 replicas = 200 per replica.
	est := e.Estimates()[0]
	if math.Abs(est.PerReplica-200) > 2 || math.Abs(est.Saturation-200) > 2 {
		t.Errorf("estimate %+v; want 200 token-cost/s per replica", est)
	}
	if got, _ := e.PerReplica("c"); got != est.PerReplica {
		t.Errorf("PerReplica %v; want the estimate's %v", got, est.PerReplica)
	}
	if est.Confidence < 0.99 || !strings.Contains(est.Evidence, "queued for 10m0s") {
		t.Errorf("estimate %+v; want confidence ~1, evidence naming the queue", est)
	}
}

// TestHeadroomSaysWhatItSaw: a calm window's evidence says whether its
// first tokens came within the TTFT target or past it with no queue (the
// prompts' own prefill, which config.CapacityLearning.OverTarget does not
// count as overload).
func TestHeadroomSaysWhatItSaw(t *testing.T) {
	tests := []struct {
		name string
		slow float64 // first tokens a second over the target, of 10
		want string
	}{
		{"within the target", 0, "within the 1s TTFT target"},
		{"past it, no queue", 3, "with 30.0% of first tokens over the 1s TTFT target but 0.0 requests waiting per replica"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := capacity.New(settings(), []capacity.Cluster{{Name: "c", Prior: 1000, PromptCost: 1, OutputCost: 4}})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 301 {
				e.Observe("c", withTTFT(obs(i, 1200, 0, 10), 10, tt.slow))
			}
			est := e.Estimates()[0]
			if est.From != capacity.FromHeadroom || !strings.Contains(est.Evidence, tt.want) {
				t.Errorf("estimate from %s, %q; want from headroom, saying %q", est.From, est.Evidence, tt.want)
			}
		})
	}
}

func TestObserveIgnoresTheOldAndTheUnknown(t *testing.T) {
	e, err := capacity.New(settings(), []capacity.Cluster{{Name: "c", Prior: 1000, PromptCost: 1, OutputCost: 4}})
	if err != nil {
		t.Fatal(err)
	}
	e.Observe("c", obs(10, 3000, 40, 20))
	e.Observe("c", obs(11, 3000, 40, 20))
	before, _ := e.PerReplica("c")
	e.Observe("c", obs(5, 1, 40, 20))     // older
	e.Observe("c", obs(11, 1, 40, 20))    // same instant
	e.Observe("nope", obs(12, 1, 40, 20)) // unknown cluster
	if after, _ := e.PerReplica("c"); after != before {
		t.Errorf("estimate %v after old observations; want %v", after, before)
	}
	if _, ok := e.PerReplica("nope"); ok {
		t.Error("an unknown cluster has an estimate")
	}
}

func TestNewRejects(t *testing.T) {
	tests := []struct {
		name string
		s    capacity.Settings
		c    capacity.Cluster
		want string
	}{
		{"no queue definition", capacity.Settings{TTFTTarget: time.Second, TTFTQuantile: 0.99}, capacity.Cluster{Name: "c", Prior: 1, PromptCost: 1, OutputCost: 1}, "saturation queue 0 and KV 0"},
		{"prior NaN", settings(), capacity.Cluster{Name: "c", Prior: math.NaN(), PromptCost: 1, OutputCost: 1}, `"c": prior NaN`},
		{"cost 0", settings(), capacity.Cluster{Name: "c", Prior: 1, OutputCost: 1}, "costs 0/1"},
		{"negative drain time", capacity.Settings{SaturationQueue: 0.5, SaturationKV: 0.95, TTFTTarget: time.Second, TTFTQuantile: 0.99, DrainTime: -time.Second}, capacity.Cluster{Name: "c", Prior: 1, PromptCost: 1, OutputCost: 1}, "drain time -1s"},
		{"quantile 1", capacity.Settings{SaturationQueue: 0.5, SaturationKV: 0.95, TTFTTarget: time.Second, TTFTQuantile: 1}, capacity.Cluster{Name: "c", Prior: 1, PromptCost: 1, OutputCost: 1}, "at quantile 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := capacity.New(tt.s, []capacity.Cluster{tt.c})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v; want an error with %q", err, tt.want)
			}
		})
	}
}

// TestLearned: the plan's saturation throughput is the estimate's less
// the backlog served within the drain time, never below half of it; the
// capacity is the estimate's.
func TestLearned(t *testing.T) {
	tests := []struct {
		name    string
		drain   time.Duration
		waiting float64 // summed over the 2 replicas
		want    float64
	}{
		// 1200 per replica at 10 requests/s over 2 replicas: 240 a request.
		{"no queue", 5 * time.Second, 0, 1200},
		{"4 waiting, 5 s", 5 * time.Second, 4, 1200 - 2*240/5.0},
		{"4 waiting, 1 s", time.Second, 4, 1200 - 2*240},
		{"a backlog past the whole throughput halves it", time.Second, 40, 600},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := settings()
			s.DrainTime = tt.drain
			e, err := capacity.New(s, []capacity.Cluster{{Name: "c", Prior: 1200, PromptCost: 1, OutputCost: 4}})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 601 {
				e.Observe("c", withTTFT(obs(i, 1200, tt.waiting, 200), 10, 0))
			}
			est := e.Estimates()[0]
			per, sat, ok := e.Learned("c")
			if !ok || per != est.PerReplica || math.Abs(sat-tt.want) > 0.01*tt.want {
				t.Errorf("Learned: %v, %v, %v; want %v, %v, true (%+v)", per, sat, ok, est.PerReplica, tt.want, est)
			}
			if _, _, ok := e.Learned("nope"); ok {
				t.Error("an unknown cluster is learned")
			}
		})
	}
}
