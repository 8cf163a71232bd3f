package experiment

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/sim/replica"
	"github.com/ilbproject/ilb/sim/workload"
)

// The replica-picking world: one region, one Envoy fleet, two engine
// clusters of 6 H100 replicas of Llama-3-8B, where the replica choice
// inside a cluster is what varies.
func replicaWorld() Fleet {
	c := func(name string) Cluster {
		return Cluster{Name: name, Region: "us-east", Models: []string{model}, Replicas: 6, Profile: replica.ProfileLlama3x8BH100}
	}
	return Fleet{
		Regions:  []string{"us-east"},
		Sources:  []Source{{Name: "edge-us", Region: "us-east"}},
		Models:   []string{model},
		Clusters: []Cluster{c("pool-a"), c("pool-b")},
	}
}

// loraWorld is replicaWorld with vLLM's LoRA on every engine, set up
// by l, and 64 adapters declared for the model.
func loraWorld(l LoRASetup) Fleet {
	f := replicaWorld()
	f.Adapters = 64
	for i := range f.Clusters {
		f.Clusters[i].LoRA = replica.LoRA{MaxLoras: l.MaxLoras, MaxCPULoras: l.MaxCPULoras, LoadTime: 100 * time.Millisecond, ActivateTime: 5 * time.Millisecond}
	}
	return f
}

// LoRAScenarioNames lists the LoRA replica-picking workloads (make
// bench-lora), apart from ReplicaScenarioNames.
func LoRAScenarioNames() []string { return []string{"lora"} }

// ReplicaScenarioNames lists the replica-picking workloads in report
// order.
func ReplicaScenarioNames() []string { return []string{"multi-turn", "agent", "rag", "no-reuse"} }

// LookupReplicaScenario builds the named replica-picking workload over d
// (0: ten minutes), at a rate to be scaled by AtLoad; "lora" is
// LookupLoRAScenario's with DefaultLoRASetup.
func LookupReplicaScenario(name string, d time.Duration) (Scenario, error) {
	if name == "lora" {
		return LookupLoRAScenario(d, DefaultLoRASetup())
	}
	s, src := replicaScenario(name, d)
	switch name {
	case "multi-turn":
		s.Summary = "long multi-turn conversations resending their history: 90% of requests are turns of sessions (8 turns on average, 30 s apart), each adding a message of ~2k tokens (documents, code, pasted text; p99 10k) and an answer of ~300 to a context that starts with a 2k-token system prompt"
		src.Lengths = workload.Lengths{InputMean: 2000, InputP99: 10000, OutputMean: 300, OutputP99: 1200}
		src.SessionShare, src.SessionTurns, src.SessionThink, src.SharedPrefixTokens = 0.9, 8, 30*time.Second, 2048
	case "agent":
		s.Summary = "agent loops: every request is a step of a session (20 steps on average, 3 s apart) adding a tool result of ~600 tokens and a short answer (~120) to a context that starts with 3k tokens of instructions and tool definitions"
		src.Lengths = workload.Lengths{InputMean: 600, InputP99: 3000, OutputMean: 120, OutputP99: 500}
		src.SessionShare, src.SessionTurns, src.SessionThink, src.SharedPrefixTokens = 1, 20, 3*time.Second, 3072
	case "rag":
		s.Summary = "retrieval-augmented questions: each request carries a 1k-token system prompt, then 3 of 500 documents of 1,500 tokens drawn by Zipf popularity (s = 1.1: a few documents are hot), then a question of ~150 tokens; a fifth of requests are follow-ups in short sessions"
		src.Lengths = workload.Lengths{InputMean: 150, InputP99: 600, OutputMean: 250, OutputP99: 1000}
		src.SharedPrefixTokens = 1024
		src.Documents, src.DocumentTokens, src.DocumentsPerRequest, src.DocumentZipf = 500, 1500, 3, 1.1
		src.SessionShare, src.SessionTurns, src.SessionThink = 0.2, 2, 20*time.Second
	case "no-reuse":
		s.Summary = "no reuse: independent requests of Azure-conversation sizes with no shared prefix, where a prefix-aware picker has nothing to gain and must not lose"
		src.Lengths = conversation
	default:
		return Scenario{}, fmt.Errorf("unknown replica scenario %q: want one of %v", name, append(ReplicaScenarioNames(), LoRAScenarioNames()...))
	}
	generate(&s, s.Duration, s.Duration, src)
	return s, nil
}

// replicaScenario is a replica-picking workload's frame: the world, the
// SLOs and one source of requests, over d (0: ten minutes).
func replicaScenario(name string, d time.Duration) (Scenario, workload.SourceSpec) {
	if d <= 0 {
		d = 10 * time.Minute
	}
	// The SLOs are MLPerf Inference's for Llama-3.1-8B (loadgen's
	// mlperf.conf): its server scenario's time to first token (2 s; its
	// 100 ms per output token never binds here) and its interactive
	// scenario, 500 ms to the first token and 30 ms per output token,
	// which the replica choice moves at loads the fleet sustains.
	s := Scenario{
		Name: name, Fleet: replicaWorld(), Duration: d, SLO: 2 * time.Second,
		Strict: SLOClass{Name: "interactive", TTFT: 500 * time.Millisecond, TPOT: 30 * time.Millisecond},
	}
	src := workload.SourceSpec{
		Name: "edge-us", MeanRate: 10, Models: []workload.Share{{Name: model, Weight: 1}}, Priorities: priorities,
	}
	return s, src
}

// HostRow is one host policy's result at one load.
type HostRow struct {
	Load   float64    `json:"load"`
	Hosts  HostPolicy `json:"hosts"`
	Result *Result    `json:"result"`
}

// CompareHosts runs the scenario at each load (a fraction of the fleet's
// saturation throughput without prefix caching, see AtLoad) with ILB's
// cluster routing and each host policy, on the same workload per load.
func CompareHosts(ctx context.Context, s Scenario, loads []float64, hosts []HostPolicy, seed uint64) ([]HostRow, error) {
	return CompareHostsRecorded(ctx, s, loads, hosts, seed, false)
}

// CompareHostsRecorded is CompareHosts, keeping every request's Record in
// each result when records is set.
func CompareHostsRecorded(ctx context.Context, s Scenario, loads []float64, hosts []HostPolicy, seed uint64, records bool) ([]HostRow, error) {
	if s.gen == nil {
		return nil, fmt.Errorf("scenario %s: its workload is not synthetic", s.Name)
	}
	var out []HostRow
	for _, l := range loads {
		ld, err := AtLoad(s.Fleet, s.Duration, l, func(f float64) ([]workload.Request, error) {
			sc, err := s.Scaled(f)
			if err != nil {
				return nil, err
			}
			return sc.Workload(seed)
		})
		if err != nil {
			return nil, fmt.Errorf("scenario %s: %w", s.Name, err)
		}
		var pols []Policy
		for _, h := range hosts {
			pols = append(pols, Policy{Name: string(h), Weights: config.PolicyOptimizer, FastLoop: true, LearnCapacity: true, Hosts: h})
		}
		rs, err := CompareRecorded(ctx, s, pols, seed, ld.Requests, records)
		if err != nil {
			return nil, err
		}
		for i, r := range rs {
			r.Load = l
			out = append(out, HostRow{Load: l, Hosts: hosts[i], Result: r})
		}
	}
	slices.SortStableFunc(out, func(a, b HostRow) int {
		switch {
		case a.Load < b.Load:
			return -1
		case a.Load > b.Load:
			return 1
		}
		return 0
	})
	return out, nil
}
