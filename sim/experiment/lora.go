package experiment

import (
	"slices"

	"github.com/ilbproject/ilb/signals"
)

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
