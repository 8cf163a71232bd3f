package experiment

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/signals"
	"github.com/ilbproject/ilb/sim/workload"
)

// LoRASetup is the lora workload's engines and adapter popularity: what
// varies between LoRA deployments.
type LoRASetup struct {
	// MaxLoras is every engine's adapter slots (vLLM's --max-loras: the
	// most distinct adapters in one batch), in [1, config.MaxReplicaCPULoras].
	MaxLoras int
	// MaxCPULoras is the adapters every engine keeps in CPU memory
	// (--max-cpu-loras), in [MaxLoras, config.MaxReplicaCPULoras]; ILB's
	// picker is told it (replica_picking.max_cpu_loras).
	MaxCPULoras int
	// Zipf is the exponent s of the 64 adapters' popularity, in [0,
	// workload.MaxDocumentZipf]: adapter i has weight (i+1)^-s.
	Zipf float64
}

// DefaultLoRASetup is make bench-lora's: 8 slots, 16 adapters in CPU
// memory, Zipf s = 1.
func DefaultLoRASetup() LoRASetup { return LoRASetup{MaxLoras: 8, MaxCPULoras: 16, Zipf: 1} }

// Validate reports every field out of range, each with its value (named
// as vLLM names the engine flag: max_loras, max_cpu_loras; zipf).
func (l LoRASetup) Validate() error {
	var errs []error
	if l.MaxLoras < 1 || l.MaxLoras > config.MaxReplicaCPULoras {
		errs = append(errs, fmt.Errorf("max_loras %d: want 1 to %d", l.MaxLoras, config.MaxReplicaCPULoras))
	}
	if l.MaxCPULoras < max(l.MaxLoras, 1) || l.MaxCPULoras > config.MaxReplicaCPULoras {
		errs = append(errs, fmt.Errorf("max_cpu_loras %d: want max_loras (%d) to %d", l.MaxCPULoras, l.MaxLoras, config.MaxReplicaCPULoras))
	}
	if !(l.Zipf >= 0 && l.Zipf <= workload.MaxDocumentZipf) {
		errs = append(errs, fmt.Errorf("zipf %g: want 0 to %g", l.Zipf, workload.MaxDocumentZipf))
	}
	return errors.Join(errs...)
}

// LookupLoRAScenario builds the lora workload over d (0: ten minutes) on
// engines set up by l, at a rate to be scaled by AtLoad.
func LookupLoRAScenario(d time.Duration, l LoRASetup) (Scenario, error) {
	if err := l.Validate(); err != nil {
		return Scenario{}, fmt.Errorf("lora workload: %w", err)
	}
	s, src := replicaScenario("lora", d)
	s.Summary = fmt.Sprintf("LoRA adapters: 90%% of requests name one of 64 adapters of the model, by Zipf popularity (s = %g: the first takes %.0f%% of them), "+
		"with Azure-conversation sizes after a 512-token system prompt of their adapter; every engine runs vLLM's LoRA with %d adapter slots (--max-loras %d), "+
		"%d adapters cached in CPU memory (--max-cpu-loras %d, which ILB's picker is told), 100 ms to load an adapter from disk and 5 ms to copy one into a GPU slot",
		l.Zipf, 100*zipfHead(64, l.Zipf), l.MaxLoras, l.MaxLoras, l.MaxCPULoras, l.MaxCPULoras)
	s.Fleet = loraWorld(l)
	src.Lengths = conversation
	src.SharedPrefixTokens = 512
	src.Adapters = workload.AdapterSpec{Share: 0.9, Count: 64, Zipf: l.Zipf}
	generate(&s, s.Duration, s.Duration, src)
	return s, nil
}

// zipfHead is the first of n items' share under Zipf exponent s.
func zipfHead(n int, s float64) float64 {
	total := 0.0
	for i := range n {
		total += math.Pow(float64(i+1), -s)
	}
	return 1 / total
}

// loraReport is what the replica's engine exports of its LoRA adapters
// (vllm:lora_requests_info, as signals reads it): nil when LoRA is
// disabled there.
func (r *runner) loraReport(rep *simReplica) *signals.LoRA {
	if !rep.lora {
		return nil
	}
	ld := rep.m.Adapters(r.adapterBuf[:0])
	r.adapterBuf = ld.Adapters[:0]
	if ld.MaxLoras == 0 {
		return nil
	}
	l := &signals.LoRA{Max: ld.MaxLoras}
	for _, a := range ld.Adapters {
		if a.Running > 0 {
			l.Running = append(l.Running, a.Name)
		}
		if a.Waiting > 0 {
			l.Waiting = append(l.Waiting, a.Name)
		}
	}
	slices.Sort(l.Running)
	slices.Sort(l.Waiting)
	return l
}

// loraAffinity is GIE's LoRA affinity score of the replica for adapter,
// from its engine's report read live (GIE scrapes every 50 ms): 1 when
// the adapter has running requests there, else 0.8 when fewer adapters
// than max_lora have requests there, 0.6 when it has waiting ones, else
// 0 (the scorer's order).
func (r *runner) loraAffinity(rep *simReplica, adapter string) float64 {
	ld := rep.m.Adapters(r.adapterBuf[:0])
	r.adapterBuf = ld.Adapters[:0]
	active, waiting := false, false
	for _, a := range ld.Adapters {
		if a.Name == adapter {
			active, waiting = a.Running > 0, a.Waiting > 0
		}
	}
	switch {
	case active:
		return 1
	case len(ld.Adapters) < ld.MaxLoras:
		return 0.8
	case waiting:
		return 0.6
	}
	return 0
}

// adapterMiss reports whether sending a request of adapter to replica
// ri goes past one that has it: ri's engine does not hold it in a GPU
// slot while another replica of the cluster that Envoy sends to does and
// has headroom (not saturated by the configuration's rule, read live).
func (r *runner) adapterMiss(ri int, adapter string) bool {
	if adapter == "" || inSlot(r.replicas[ri], adapter) {
		return false
	}
	for _, oi := range r.up(r.replicas[ri].cluster) {
		o := r.replicas[oi]
		if oi == ri || !inSlot(o, adapter) {
			continue
		}
		l := o.m.Load()
		if !r.cfg.Signals.Saturated(float64(l.Waiting), float64(l.Running), true, l.KVUsage) {
			return true
		}
	}
	return false
}

// inSlot reports whether the replica's engine holds adapter in a GPU
// slot (loaded: its requests need no load or copy).
func inSlot(rep *simReplica, adapter string) bool {
	gpu, _ := rep.m.AdapterCache()
	return slices.Contains(gpu, adapter)
}
