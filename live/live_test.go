package live_test

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/live"
	"github.com/ilbproject/ilb/picker"
	"github.com/ilbproject/ilb/route"
	"github.com/ilbproject/ilb/signals"
)

// TestFromSignalsReplicas: each replica state maps to what replica
// picking may do with it, and only fresh metrics carry a decode load.
func TestFromSignalsReplicas(t *testing.T) {
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	m := signals.Metrics{Running: 3, Waiting: 6}
	tests := []struct {
		name string
		rep  signals.Replica
		want live.Replica
	}{
		{"ready, scraped", signals.Replica{Address: "a:1", State: signals.StateReady, Ramp: 1, LastScrape: at, Metrics: m}, live.Replica{Address: "a:1", Ramp: 1, Running: 3, ScrapedAt: at, Waiting: 6, QueueSince: at}},
		{"warming keeps its ramp", signals.Replica{Address: "a:1", State: signals.StateWarming, Ramp: 0.4, LastScrape: at, Metrics: m, Saturated: true}, live.Replica{Address: "a:1", Ramp: 0.4, Saturated: true, Running: 3, ScrapedAt: at, Waiting: 6, QueueSince: at}},
		{"ready, last scrape failed: load unknown", signals.Replica{Address: "a:1", State: signals.StateReady, Ramp: 1, LastScrape: at, LastError: "timeout", Metrics: m}, live.Replica{Address: "a:1", Ramp: 1}},
		{"stale: serves, load unknown", signals.Replica{Address: "a:1", State: signals.StateStale, Ramp: 1, LastScrape: at, Metrics: m}, live.Replica{Address: "a:1", Ramp: 1}},
		{"starting: the fleet that was serving", signals.Replica{Address: "a:1", State: signals.StateStarting}, live.Replica{Address: "a:1", Ramp: 1}},
		{"draining: out", signals.Replica{Address: "a:1", State: signals.StateDraining, LastScrape: at, Metrics: m}, live.Replica{Address: "a:1", Out: "draining"}},
		{"unhealthy: out, cache forgotten", signals.Replica{Address: "a:1", State: signals.StateUnhealthy}, live.Replica{Address: "a:1", Out: live.OutUnhealthy}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := signals.NewSnapshot(at, []string{"c"}, [][]signals.Replica{{tt.rep}})
			got := live.FromSignals(snap, config.Default().Controller.Capacity, nil).Clusters["c"].Replicas
			if len(got) != 1 || !reflect.DeepEqual(got[0], tt.want) {
				t.Fatalf("replicas %+v; want [%+v]", got, tt.want)
			}
		})
	}
}

// TestQueueLasting: a replica's queue lasts when its engine reported
// requests waiting at every scrape over capacity.LastingFor, as the
// previous views saw them, no fewer at each than at the one before (a
// shrinking queue drains): two scrapes at the default 1 s interval, four
// at 250 ms; a view of the same scrape keeps the verdict, and a failed
// scrape (load unknown) breaks the run.
func TestQueueLasting(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 8, 0, 0, 0, time.UTC)
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	type scrape struct {
		at      time.Time
		waiting float64
		failed  bool
		addr    string // "" a:1
	}
	snap := func(s scrape) *signals.Snapshot {
		r := signals.Replica{Address: "a:1", State: signals.StateReady, Ramp: 1, LastScrape: s.at, Metrics: signals.Metrics{Running: 256, Waiting: s.waiting}}
		if s.addr != "" {
			r.Address = s.addr
		}
		if s.failed {
			r.LastError = "timeout"
		}
		return signals.NewSnapshot(s.at, []string{"c"}, [][]signals.Replica{{r}})
	}
	tests := []struct {
		name  string
		views []scrape // in order; the last is now
		want  bool
	}{
		{"a queue at two scrapes in a row", []scrape{{at: sec(0), waiting: 2}, {at: sec(1), waiting: 30}}, true},
		{"a queue no shorter at the last scrape", []scrape{{at: sec(0), waiting: 30}, {at: sec(1), waiting: 30}}, true},
		{"a queue that shrank is draining", []scrape{{at: sec(0), waiting: 30}, {at: sec(1), waiting: 29}}, false},
		{"a queue at the last scrape only", []scrape{{at: sec(0)}, {at: sec(1), waiting: 30}}, false},
		{"no queue at the last scrape", []scrape{{at: sec(0), waiting: 30}, {at: sec(1)}}, false},
		{"under one request waiting is no queue", []scrape{{at: sec(0), waiting: 30}, {at: sec(1), waiting: 0.5}}, false},
		{"the same scrape seen again keeps a lasting queue", []scrape{{at: sec(0), waiting: 2}, {at: sec(1), waiting: 30}, {at: sec(1), waiting: 30}}, true},
		{"the same scrape seen again is not a second one", []scrape{{at: sec(1), waiting: 30}, {at: sec(1), waiting: 30}}, false},
		{"a failed scrape: load unknown", []scrape{{at: sec(0), waiting: 2}, {at: sec(1), waiting: 30, failed: true}}, false},
		{"a failed scrape breaks the run", []scrape{{at: sec(0), waiting: 2}, {at: sec(1), waiting: 30, failed: true}, {at: sec(2), waiting: 30}}, false},
		{"no previous view", []scrape{{at: sec(1), waiting: 30}}, false},
		{"another replica's queue", []scrape{{at: sec(0), waiting: 30, addr: "a:0"}, {at: sec(1), waiting: 30}}, false},
		{"two scrapes of the default interval's jitter apart", []scrape{{at: ms(0), waiting: 3}, {at: ms(900), waiting: 3}}, true},
		{"four scrapes 250 ms apart span 750 ms", []scrape{{at: ms(0), waiting: 3}, {at: ms(250), waiting: 3}, {at: ms(500), waiting: 4}, {at: ms(750), waiting: 4}}, true},
		{"three scrapes 250 ms apart are a burst", []scrape{{at: ms(0), waiting: 3}, {at: ms(250), waiting: 3}, {at: ms(500), waiting: 4}}, false},
		{"a shrink within the run starts it again", []scrape{{at: ms(0), waiting: 3}, {at: ms(250), waiting: 2}, {at: ms(500), waiting: 4}, {at: ms(750), waiting: 4}}, false},
		{"a scrape without a queue within the run starts it again", []scrape{{at: ms(0), waiting: 3}, {at: ms(250)}, {at: ms(500), waiting: 4}, {at: ms(750), waiting: 4}, {at: ms(1250), waiting: 4}}, true},
	}
	slo := config.Default().Controller.Capacity
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l *live.State
			for _, s := range tt.views {
				l = live.FromSignals(snap(s), slo, l)
			}
			reps := l.Clusters["c"].Replicas
			if len(reps) != 1 || reps[0].QueueLasting != tt.want {
				t.Fatalf("replicas %+v; want queue lasting %v", reps, tt.want)
			}
			if got := l.Clusters["c"].Candidates(nil); len(got) != 1 || got[0].QueueLasting != tt.want {
				t.Fatalf("candidates %+v; want queue lasting %v", got, tt.want)
			}
		})
	}
}

// TestFromSignalsCluster: a cluster's pressure, saturation and TTFT are
// the snapshot's summary of its serving replicas.
func TestFromSignalsCluster(t *testing.T) {
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	rep := func(addr string, st signals.State, waiting, running, ttft, rate float64, sat bool) signals.Replica {
		return signals.Replica{Address: addr, State: st, Ramp: 1, Saturated: sat, LastScrape: at, Metrics: signals.Metrics{
			Waiting: waiting, Running: running, TTFTKnown: true, FirstTokensPerSecond: rate, TTFTMeanSeconds: ttft, TTFTMeanKnown: true,
		}}
	}
	snap := signals.NewSnapshot(at, []string{"busy", "calm", "gone"}, [][]signals.Replica{
		{rep("b:2", signals.StateReady, 8, 2, 0.5, 4, true), rep("b:1", signals.StateReady, 4, 2, 0.3, 2, true)},
		{rep("c:1", signals.StateReady, 0, 1, 0.2, 0, false), rep("c:2", signals.StateDraining, 9, 9, 9, 9, true)},
		{rep("g:1", signals.StateUnhealthy, 0, 0, 0, 0, false)},
	})
	l := live.FromSignals(snap, config.Default().Controller.Capacity, nil)
	busy, calm, gone := l.Clusters["busy"], l.Clusters["calm"], l.Clusters["gone"]
	// busy: 12 waiting over 4 running; mean TTFT weighted by rate
	// (0.5×4 + 0.3×2)/6 ≈ 0.433, under the queue's wait 12/6 = 2 s.
	if !busy.Saturated || busy.Pressure != 3 || !busy.PressureKnown || busy.TTFT != 2 || busy.FirstTokensPerSecond != 6 || busy.Excluded != "" {
		t.Errorf("busy: %+v", busy)
	}
	if busy.Replicas[0].Address != "b:1" || busy.Replicas[1].Address != "b:2" {
		t.Errorf("busy replicas not in address order: %+v", busy.Replicas)
	}
	if calm.Saturated || calm.Pressure != 0 || !calm.PressureKnown || math.Abs(calm.TTFT-0.2) > 1e-9 || !calm.TTFTKnown {
		t.Errorf("calm (its draining replica does not count): %+v", calm)
	}
	if gone.Excluded != "no serving replica: 1 unhealthy" || gone.PressureKnown {
		t.Errorf("gone: %+v", gone)
	}
}

// TestSignal: what the route decision takes of a cluster, the requests
// awaiting there adding to its predicted TTFT, and its engines' queue's
// wait (Little's law).
func TestSignal(t *testing.T) {
	c := live.Cluster{Saturated: true, Pressure: 1.5, PressureKnown: true, TTFT: 0.4, TTFTKnown: true, FirstTokensPerSecond: 10}
	idle := live.Cluster{TTFT: 0.4, TTFTKnown: true, FirstTokensPerSecond: 5, Serving: 4}
	queued := idle
	queued.Waiting, queued.Pressure, queued.PressureKnown = 4, 0.5, true
	short := queued
	short.Waiting = 3
	stalled := queued
	stalled.FirstTokensPerSecond = 0
	blind := stalled
	blind.TTFT, blind.TTFTKnown = 0, false
	slowIdle := idle
	slowIdle.TTFT = 0.8
	tests := []struct {
		name     string
		c        live.Cluster
		awaiting int64
		work     float64
		want     route.Signal
	}{
		{"none awaiting", c, 0, 0, route.Signal{Saturated: true, Pressure: 1.5, PressureKnown: true, TTFT: route.PredictTTFT(0.4, 0, 10, 0), TTFTKnown: true}},
		{"20 awaiting", c, 20, 0, route.Signal{Saturated: true, Pressure: 1.5, PressureKnown: true, TTFT: route.PredictTTFT(0.4, 20, 10, 0), TTFTKnown: true, Awaiting: 20}},
		{"excluded", live.Cluster{Excluded: "no replica"}, 3, 0, route.Signal{Excluded: true, Awaiting: 3}},
		// Four serving replicas giving 5 first tokens a second.
		{"fewer of ours awaiting than replicas is no queue", idle, 3, 0, route.Signal{TTFT: 0.6, TTFTKnown: true, Serving: 4, Awaiting: 3}},
		// 4 waiting, admitted at 5 first tokens a second: 0.8 s.
		{"a request waiting per replica at the engines is a queue", queued, 0, 0, route.Signal{TTFT: 0.4, TTFTKnown: true, Pressure: 0.5, PressureKnown: true, Serving: 4, QueueWait: 0.8}},
		// No first token last interval: four replicas at 0.4 s each admit
		// 10 a second, so the 4 waiting take 0.4 s.
		{"a queue without first tokens: the replicas' rate at the engines' TTFT", stalled, 0, 0, route.Signal{TTFT: 0.4, TTFTKnown: true, Pressure: 0.5, PressureKnown: true, Serving: 4, QueueWait: 0.4}},
		{"a queue without a rate: no wait known", blind, 0, 0, route.Signal{Pressure: 0.5, PressureKnown: true, Serving: 4}},
		// 3 waiting at 4 replicas: the moment between two steps, no queue.
		{"fewer waiting than serving replicas: no queue, no wait", short, 0, 0, route.Signal{TTFT: 0.4, TTFTKnown: true, Pressure: 0.5, PressureKnown: true, Serving: 4}},
		{"a burst: ours awaiting, more than the engines explain, set the TTFT (Little's law)", idle, 4, 0, route.Signal{TTFT: 0.8, TTFTKnown: true, Serving: 4, Awaiting: 4}},
		{"ours awaiting, as the engines explain: their TTFT", slowIdle, 4, 0, route.Signal{TTFT: 0.8, TTFTKnown: true, Serving: 4, Awaiting: 4}},
		{"the work of ours awaiting passes through", idle, 3, 1500, route.Signal{TTFT: 0.6, TTFTKnown: true, Serving: 4, Awaiting: 3, Work: 1500}},
		{"a negative count or work is none", idle, -2, -5, route.Signal{TTFT: 0.4, TTFTKnown: true, Serving: 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.c.Signal(tt.awaiting, tt.work, 0); got != tt.want {
				t.Fatalf("%+v; want %+v", got, tt.want)
			}
		})
	}
	if a, b := c.Signal(0, 0, 0).TTFT, c.Signal(20, 0, 0).TTFT; !(b > a) {
		t.Errorf("20 requests awaiting predict %v s, none %v s: want more", b, a)
	}
}

// TestCandidates: only the replicas that serve are the picker's.
func TestCandidates(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	c := live.Cluster{Replicas: []live.Replica{
		{Address: "a:1", Ramp: 1, Running: 2, ScrapedAt: at, Waiting: 3, QueueLasting: true, LoRA: &signals.LoRA{Running: []string{"sql"}, Waiting: []string{"chat"}, Max: 4}},
		{Address: "a:2", Out: "draining"},
		{Address: "a:3", Ramp: 0.5, Saturated: true},
		{Address: "a:4", Out: live.OutUnhealthy},
	}}
	got := c.Candidates(nil)
	want := []picker.Replica{
		{Address: "a:1", Ramp: 1, Running: 2, ScrapedAt: at, QueueLasting: true, Adapters: picker.Adapters{Known: true, Running: []string{"sql"}, Waiting: []string{"chat"}, Max: 4}},
		{Address: "a:3", Ramp: 0.5, Saturated: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%+v; want %+v", got, want)
	}
}

// TestPickerRequest: the draw comes from the session when there is one,
// the session stands for the prefix only when the prompt was not read,
// and max_tokens below the default lowers the decode work.
func TestPickerRequest(t *testing.T) {
	m := config.Model{Name: "m", PromptTokenCost: 1, OutputTokenCost: 4}
	ep := config.ExtProc{DefaultOutputTokens: 250}
	rand := func() uint64 { return 99 }
	tests := []struct {
		name string
		p    live.Prompt
		want picker.Request
	}{
		{"read, no session", live.Prompt{Tokens: 300, Read: true, Blocks: []uint64{1, 2}}, picker.Request{Blocks: []uint64{1, 2}, PromptTokens: 300, Draw: 99, DecodeWork: 1000, DecodeUnit: 1000}},
		{"read, session orders ties only", live.Prompt{Tokens: 300, Read: true, Blocks: []uint64{1}, Session: 7}, picker.Request{Blocks: []uint64{1}, PromptTokens: 300, Draw: 7, DecodeWork: 1000, DecodeUnit: 1000}},
		{"headers only: the session stands for the prefix", live.Prompt{Tokens: 40, Session: 7}, picker.Request{PromptTokens: 40, Draw: 7, Session: 7, DecodeWork: 1000, DecodeUnit: 1000}},
		{"max_tokens under the default", live.Prompt{Tokens: 10, Read: true, MaxTokens: 50}, picker.Request{PromptTokens: 10, Draw: 99, DecodeWork: 200, DecodeUnit: 1000}},
		{"max_tokens over the default: a bound, not an expectation", live.Prompt{Tokens: 10, Read: true, MaxTokens: 5000}, picker.Request{PromptTokens: 10, Draw: 99, DecodeWork: 1000, DecodeUnit: 1000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := live.PickerRequest(m, ep, tt.p, rand); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("%+v; want %+v", got, tt.want)
			}
		})
	}
}

// TestOverloaded: a cluster is overloaded in the SLO's terms when more
// than 1 − ttft_quantile of its first tokens came past the TTFT target
// while at least one request waited per replica, or when it is saturated;
// slow first tokens with nothing waiting are the prompts' own prefill.
func TestOverloaded(t *testing.T) {
	at := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	slo := config.Default().Controller.Capacity // 99% within the target
	rep := func(addr string, waiting, running, first, slow float64, sat bool) signals.Replica {
		return signals.Replica{Address: addr, State: signals.StateReady, Ramp: 1, Saturated: sat, LastScrape: at, Metrics: signals.Metrics{
			Waiting: waiting, Running: running, TTFTKnown: true, FirstTokensPerSecond: first, SlowFirstTokensPerSecond: slow,
			TTFTMeanSeconds: 1, TTFTMeanKnown: true,
		}}
	}
	tests := []struct {
		name string
		reps []signals.Replica
		want bool
	}{
		{"slow first tokens with a queue at max_num_seqs", []signals.Replica{rep("a:1", 65, 768, 20, 3, false), rep("a:2", 70, 768, 20, 2, false)}, true},
		{"slow first tokens with nothing waiting: prefill, not overload", []signals.Replica{rep("a:1", 0, 4, 10, 5, false), rep("a:2", 0, 4, 10, 5, false)}, false},
		{"a queue but every first token in time", []signals.Replica{rep("a:1", 65, 768, 20, 0, false), rep("a:2", 70, 768, 20, 0, false)}, false},
		{"1% slow is within a 99% target", []signals.Replica{rep("a:1", 5, 8, 50, 0.5, false), rep("a:2", 5, 8, 50, 0.5, false)}, false},
		{"under a request waiting per replica", []signals.Replica{rep("a:1", 1, 8, 10, 5, false), rep("a:2", 0, 8, 10, 5, false)}, false},
		{"saturated is overloaded", []signals.Replica{rep("a:1", 9, 2, 0, 0, true)}, true},
		{"no first token: not judged on TTFT", []signals.Replica{rep("a:1", 9, 20, 0, 0, false)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := signals.NewSnapshot(at, []string{"c"}, [][]signals.Replica{tt.reps})
			c := live.FromSignals(snap, slo, nil).Clusters["c"]
			if c.Overloaded != tt.want {
				t.Fatalf("overloaded %v; want %v (%+v)", c.Overloaded, tt.want, snap.Clusters["c"])
			}
			if got := c.Signal(0, 0, 0).Overloaded; got != tt.want {
				t.Fatalf("the route signal says overloaded %v; want %v", got, tt.want)
			}
		})
	}
}

// TestOverloadHolds: a cluster over the TTFT target in every interval
// over capacity.LastingFor (two at the default 1 s interval, four at
// 250 ms) stays overloaded while a request or more still waits per
// replica, for at most OverloadHold after the last such run; the hold
// ends with the queue; a shorter run over the target (a burst) is not
// held.
func TestOverloadHolds(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 6, 0, 0, 0, time.UTC)
	slo := config.Default().Controller.Capacity
	snap := func(at time.Time, waiting, slow float64, sat bool) *signals.Snapshot {
		rep := func(addr string) signals.Replica {
			return signals.Replica{Address: addr, State: signals.StateReady, Ramp: 1, Saturated: sat, LastScrape: at, Metrics: signals.Metrics{
				Waiting: waiting, Running: 64, TTFTKnown: true, FirstTokensPerSecond: 20, SlowFirstTokensPerSecond: slow,
				TTFTMeanSeconds: 1, TTFTMeanKnown: true,
			}}
		}
		return signals.NewSnapshot(at, []string{"c"}, [][]signals.Replica{{rep("a:1"), rep("a:2")}})
	}
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	// 20% of first tokens late, 8 waiting per replica, at t0-1s and t0.
	over0, over := snap(sec(-1), 8, 4, false), snap(t0, 8, 4, false)
	tests := []struct {
		name  string
		prev  []*signals.Snapshot // in order, before now
		now   *signals.Snapshot
		want  bool
		since time.Time // the SustainedAt wanted
	}{
		{"over the target now", nil, over, true, time.Time{}},
		{"one interval over the target is a burst: not held", []*signals.Snapshot{over}, snap(sec(1), 3, 0, false), false, time.Time{}},
		{"two in a row: held while the queue lasts", []*signals.Snapshot{over0, over}, snap(sec(5), 3, 0, false), true, t0},
		{"held through several intervals", []*signals.Snapshot{over0, over, snap(sec(1), 6, 0, false), snap(sec(2), 4, 0, false)}, snap(sec(3), 2, 0, false), true, t0},
		{"under a request waiting per replica: overload ends", []*signals.Snapshot{over0, over}, snap(sec(1), 0.5, 0, false), false, time.Time{}},
		{"a gap in the queue ends the hold", []*signals.Snapshot{over0, over, snap(sec(1), 0, 0, false)}, snap(sec(2), 8, 0, false), false, time.Time{}},
		{"no longer than the hold", []*signals.Snapshot{over0, over}, snap(t0.Add(live.OverloadHold), 8, 0, false), false, time.Time{}},
		{"a new pair renews it", []*signals.Snapshot{over0, over, snap(sec(9), 8, 4, false), snap(sec(10), 8, 4, false)}, snap(sec(20), 8, 0, false), true, sec(10)},
		{"an isolated interval over the target keeps a hold", []*signals.Snapshot{over0, over, snap(sec(1), 8, 0, false), snap(sec(2), 8, 4, false)}, snap(sec(3), 8, 0, false), true, t0},
		{"saturation alone is not held", []*signals.Snapshot{snap(sec(-1), 200, 0, true), snap(t0, 200, 0, true)}, snap(sec(1), 8, 0, false), false, time.Time{}},
		{"no previous view", nil, snap(sec(1), 8, 0, false), false, time.Time{}},
		{"four intervals of 250 ms in a row: held", []*signals.Snapshot{snap(ms(0), 8, 4, false), snap(ms(250), 8, 4, false), snap(ms(500), 8, 4, false), snap(ms(750), 8, 4, false)}, snap(ms(1000), 3, 0, false), true, ms(750)},
		{"three intervals of 250 ms in a row are a burst", []*signals.Snapshot{snap(ms(0), 8, 4, false), snap(ms(250), 8, 4, false), snap(ms(500), 8, 4, false)}, snap(ms(750), 3, 0, false), false, time.Time{}},
		{"an interval within the target breaks the run", []*signals.Snapshot{snap(ms(0), 8, 4, false), snap(ms(250), 8, 0, false), snap(ms(500), 8, 4, false), snap(ms(750), 8, 4, false)}, snap(ms(1000), 3, 0, false), false, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l *live.State
			for _, s := range tt.prev {
				l = live.FromSignals(s, slo, l)
			}
			c := live.FromSignals(tt.now, slo, l).Clusters["c"]
			if c.Overloaded != tt.want || !c.SustainedAt.Equal(tt.since) {
				t.Fatalf("overloaded %v, sustained since %v; want %v since %v", c.Overloaded, c.SustainedAt, tt.want, tt.since)
			}
			if got := c.Signal(0, 0, 0).Overloaded; got != tt.want {
				t.Fatalf("the route signal says overloaded %v; want %v", got, tt.want)
			}
		})
	}
}

// TestPrefillPerToken: a cluster's prefill time per prompt token is its
// engines' mean TTFT less their queue's wait, over the prompt tokens per
// first token; an interval without first tokens keeps the last figure.
func TestPrefillPerToken(t *testing.T) {
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	rep := func(addr string, waiting, ttft, first, prompt float64) signals.Replica {
		return signals.Replica{Address: addr, State: signals.StateReady, Ramp: 1, LastScrape: at, Metrics: signals.Metrics{
			Waiting: waiting, Running: 4, TTFTKnown: true, FirstTokensPerSecond: first, TTFTMeanSeconds: ttft, TTFTMeanKnown: true,
			RatesKnown: true, PromptTokensPerSecond: prompt,
		}}
	}
	cfg := config.Default().Controller.Capacity
	tests := []struct {
		name string
		reps []signals.Replica
		want float64
	}{
		// 2,000 prompt tokens per first token, 0.4 s each.
		{"no queue: the mean TTFT per prompt token", []signals.Replica{rep("a:1", 0, 0.4, 5, 10000), rep("a:2", 0, 0.4, 5, 10000)}, 0.4 / 2000},
		// 10 waiting at 10 first tokens a second: 1 s of the 1.4 s is the queue.
		{"the queue's wait left out", []signals.Replica{rep("a:1", 5, 1.4, 5, 10000), rep("a:2", 5, 1.4, 5, 10000)}, 0.4 / 2000},
		{"a queue longer than the mean: 0, not negative", []signals.Replica{rep("a:1", 50, 1.4, 5, 10000), rep("a:2", 50, 1.4, 5, 10000)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := signals.NewSnapshot(at, []string{"c"}, [][]signals.Replica{tt.reps})
			c := snap.Clusters["c"]
			if !c.PrefillKnown || math.Abs(c.PrefillSecondsPerToken-tt.want) > 1e-12 {
				t.Errorf("signals: %v (known %v); want %v", c.PrefillSecondsPerToken, c.PrefillKnown, tt.want)
			}
			l := live.FromSignals(snap, cfg, nil)
			if got := l.Clusters["c"].Signal(0, 0, 0).PrefillPerToken; math.Abs(got-tt.want) > 1e-12 {
				t.Errorf("route signal: %v; want %v", got, tt.want)
			}
		})
	}
	// Then an interval without first tokens: the last figure stands.
	first := live.FromSignals(signals.NewSnapshot(at, []string{"c"}, [][]signals.Replica{{rep("a:1", 0, 0.4, 5, 10000)}}), cfg, nil)
	quiet := signals.NewSnapshot(at.Add(time.Second), []string{"c"}, [][]signals.Replica{{rep("a:1", 0, 0.4, 0, 0)}})
	if quiet.Clusters["c"].PrefillKnown {
		t.Fatalf("prefill known without first tokens: %+v", quiet.Clusters["c"])
	}
	if got := live.FromSignals(quiet, cfg, first).Clusters["c"].PrefillPerToken; math.Abs(got-0.4/2000) > 1e-12 {
		t.Errorf("after a quiet interval: %v; want the last figure %v", got, 0.4/2000)
	}
}

// TestPrefillPooled: a cluster's prefill speed pools its intervals —
// their time over their prompt tokens, each interval weighted by its
// length and fading over live.PrefillWindow — and an interval slower
// than the pool counts at once (contention), a faster one only through
// the pool.
func TestPrefillPooled(t *testing.T) {
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	cfg := config.Default().Controller.Capacity
	// interval is a snapshot at at+sec of one replica giving 5 first
	// tokens a second of prompt tokens each, in ttft seconds, no queue:
	// its figure is ttft/prompt seconds a token, over 5×prompt tokens a
	// second.
	interval := func(sec, ttft, prompt float64) *signals.Snapshot {
		first := 5.0
		if prompt == 0 {
			first = 0 // a quiet interval
		}
		when := at.Add(time.Duration(sec * float64(time.Second)))
		return signals.NewSnapshot(when, []string{"c"}, [][]signals.Replica{{{
			Address: "a:1", State: signals.StateReady, Ramp: 1, LastScrape: when, Metrics: signals.Metrics{
				Running: 4, TTFTKnown: true, FirstTokensPerSecond: first, TTFTMeanSeconds: ttft, TTFTMeanKnown: true,
				RatesKnown: true, PromptTokensPerSecond: first * prompt,
			},
		}}})
	}
	fade := func(s float64) float64 { return math.Exp(-s / live.PrefillWindow.Seconds()) }
	tests := []struct {
		name  string
		snaps []*signals.Snapshot
		want  float64
	}{
		{"one interval: its figure", []*signals.Snapshot{interval(0, 0.4, 2000)}, 0.4 / 2000},
		{
			"a faster interval: pooled by prompt tokens",
			[]*signals.Snapshot{interval(0, 0.4, 2000), interval(1, 0.3, 6000)},
			(0.4*5*fade(1) + 0.3*5) / (2000*5*fade(1) + 6000*5),
		},
		{"a slower interval: its figure at once", []*signals.Snapshot{interval(0, 0.4, 2000), interval(1, 0.9, 2000)}, 0.9 / 2000},
		{"a quiet interval: the pool stands", []*signals.Snapshot{interval(0, 0.4, 2000), interval(1, 0, 0)}, 0.4 / 2000},
		{
			"the pool fades: a minute on, the old weighs e⁻⁴ of what it did",
			[]*signals.Snapshot{interval(0, 0.8, 2000), interval(60, 0.2, 2000)},
			(0.8*5*fade(60) + 0.2*5*60) / (2000*5*fade(60) + 2000*5*60),
		},
		{"a view of the same instant adds nothing", []*signals.Snapshot{interval(0, 0.4, 2000), interval(0, 0.2, 2000)}, 0.4 / 2000},
		{"a view out of order adds nothing", []*signals.Snapshot{interval(1, 0.4, 2000), interval(0, 0.2, 2000)}, 0.4 / 2000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l *live.State
			for _, s := range tt.snaps {
				l = live.FromSignals(s, cfg, l)
			}
			if got := l.Clusters["c"].Signal(0, 0, 0).PrefillPerToken; math.Abs(got-tt.want) > 1e-12 {
				t.Errorf("prefill per token %v; want %v", got, tt.want)
			}
		})
	}
}
