package replica

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// LoRA configures LoRA adapters, as vLLM's --enable-lora, --max-loras and
// --max-cpu-loras do, plus what loading an adapter costs. The zero value
// disables LoRA.
//
// The model (vLLM v1; see [Replica.Adapters] for what is reported):
//
//   - Scheduling: when the scheduler admits waiting requests, the batch may
//     hold at most MaxLoras distinct adapters (those of the running
//     requests scheduled in the step, plus those admitted so far). A
//     waiting request whose adapter would be one too many is skipped: it
//     stays in the waiting queue, in its place, and the requests behind it
//     may still be admitted. Base-model requests are never held back.
//     (vllm/v1/core/sched/scheduler.py, Scheduler.schedule: the
//     scheduled_loras set and skipped_waiting_requests, put back at the
//     head of the queue in their order by RequestQueue.prepend_requests.)
//   - Loading: before a step runs, every adapter of its batch must be in
//     one of MaxLoras GPU slots. One that is not is copied there from the
//     CPU cache (ActivateTime), after being loaded from disk into that
//     cache if it is not there either (LoadTime, then ActivateTime). The
//     step takes that much longer: vLLM's worker loads and activates
//     adapters synchronously before the forward pass
//     (vllm/lora/worker_manager.py, LRUCacheWorkerLoRAManager.add_adapter,
//     via set_active_adapters from the model runner).
//   - Eviction: both the CPU cache (MaxCPULoras adapters) and the GPU
//     slots are least-recently-used caches, where an adapter is used by
//     every step whose batch holds it (vllm/lora/model_manager.py,
//     LRUCacheLoRAModelManager: _registered_adapters and _active_adapters,
//     touched on every add_adapter / activate_adapter). Neither evicts an
//     adapter of the step's batch: the batch's adapters are touched first.
//     An adapter evicted from the CPU cache also leaves its GPU slot
//     (AdapterLRUCache._on_remove calls deactivate_adapter).
//   - Preemption keeps adapters loaded; a Failed replica loses its GPU
//     slots and its CPU cache with the rest of its state.
//
// Divergences: vLLM touches and activates a batch's adapters in set
// order, so that with a full cache it can evict an adapter of the batch
// and load it again in the same step; here the batch's adapters are
// touched first, in batch order, and never evicted. vLLM's LRU caches
// can also pin adapters, which is not modelled.
type LoRA struct {
	// MaxLoras is vLLM's --max-loras: the most distinct adapters in one
	// batch, and the number of GPU slots; >= 0. 0 disables LoRA: a
	// request with an [Request.Adapter] is refused (Failed), as vLLM
	// refuses a LoRA request when LoRA is not enabled.
	MaxLoras int
	// MaxCPULoras is vLLM's --max-cpu-loras: the adapters kept in the CPU
	// cache; 0 means vLLM's default, MaxLoras (LoRAConfig in
	// vllm/config/lora.py), else >= MaxLoras.
	MaxCPULoras int
	// LoadTime is what loading an adapter that is not in the CPU cache
	// (from disk) adds to the step that needs it; >= 0.
	LoadTime time.Duration
	// ActivateTime is what copying an adapter from the CPU cache into a
	// GPU slot adds to the step that needs it; >= 0. An adapter loaded
	// from disk is activated too: it costs LoadTime + ActivateTime.
	ActivateTime time.Duration
}

// validate reports the problems of l, each naming the field and value.
func (l LoRA) validate() []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidOptions}, args...)...))
	}
	if l.MaxLoras < 0 {
		bad("LoRA.MaxLoras %d: want >= 0 (0: LoRA disabled)", l.MaxLoras)
	}
	if l.MaxCPULoras < 0 || l.MaxCPULoras > 0 && l.MaxCPULoras < l.MaxLoras {
		bad("LoRA.MaxCPULoras %d: want 0 (MaxLoras) or >= MaxLoras %d", l.MaxCPULoras, l.MaxLoras)
	}
	if l.LoadTime < 0 {
		bad("LoRA.LoadTime %v: want >= 0", l.LoadTime)
	}
	if l.ActivateTime < 0 {
		bad("LoRA.ActivateTime %v: want >= 0", l.ActivateTime)
	}
	return errs
}

// withDefaults returns l with MaxCPULoras resolved.
func (l LoRA) withDefaults() LoRA {
	if l.MaxCPULoras == 0 {
		l.MaxCPULoras = l.MaxLoras
	}
	return l
}

// AdapterLoad is one LoRA adapter's requests in a replica.
type AdapterLoad struct {
	// Name is the adapter ([Request.Adapter]).
	Name string
	// Running is the number of its admitted requests; Waiting, of its
	// queued (or preempted) ones.
	Running, Waiting int
}

// LoRALoad is what vLLM's scheduler statistics report of LoRA adapters
// (SchedulerStats.running_lora_adapters and waiting_lora_adapters in
// vllm/v1/metrics/stats.py, and the max_lora label of
// vllm:lora_requests_info).
type LoRALoad struct {
	// MaxLoras is [LoRA.MaxLoras]; 0 when LoRA is disabled.
	MaxLoras int
	// Adapters lists every adapter with requests in the replica, running
	// or waiting, in the order their requests came in: an adapter takes
	// its place when it gets a request while it has none, and leaves the
	// list when its last request ends (the insertion order of the dicts
	// vLLM reports).
	Adapters []AdapterLoad
}

// adapter is the state of one adapter the replica has seen.
type adapter struct {
	name             string
	running, waiting int
	since            uint64 // when its requests came in, while it has some
	used             uint64 // LRU clock of its last use by a step (both caches)
	inCPU, inGPU     bool
	mark             uint64        // the step whose batch holds it
	stepCost         time.Duration // what loading it added to that step
}

// loraState is a replica's adapters: the registry, the batch of the step
// being composed, and the two caches. The registry only grows (one entry
// per adapter name ever submitted); everything else is bounded by
// MaxLoras and MaxCPULoras, so stepping does not allocate.
type loraState struct {
	cfg     LoRA // with defaults
	ids     map[string]int32
	ad      []adapter // by id; [0] is the base model
	batch   []int32   // distinct adapters of the step being composed
	gpu     []int32   // adapters in GPU slots
	cpu     []int32   // adapters in the CPU cache
	skipped []*seq    // waiting requests skipped by the MaxLoras rule in the step
	step    uint64    // steps composed
	clock   uint64    // LRU clock
	arrived uint64    // ordering of the in-flight adapters
}

func (l *loraState) init(cfg LoRA) {
	*l = loraState{cfg: cfg.withDefaults(), ad: make([]adapter, 1)}
	if l.cfg.MaxLoras > 0 {
		l.ids = make(map[string]int32)
		l.batch = make([]int32, 0, l.cfg.MaxLoras)
		l.gpu = make([]int32, 0, l.cfg.MaxLoras)
		l.cpu = make([]int32, 0, l.cfg.MaxCPULoras)
	}
}

// enabled reports whether LoRA is enabled.
func (l *loraState) enabled() bool { return l.cfg.MaxLoras > 0 }

// id returns the id of adapter name, registering it if new.
func (l *loraState) id(name string) int32 {
	if id, ok := l.ids[name]; ok {
		return id
	}
	id := int32(len(l.ad))
	l.ad = append(l.ad, adapter{name: name})
	l.ids[name] = id
	return id
}

// count moves adapter id's request counts by the deltas.
func (l *loraState) count(id int32, running, waiting int) {
	if id == 0 {
		return
	}
	a := &l.ad[id]
	if a.running+a.waiting == 0 {
		l.arrived++
		a.since = l.arrived
	}
	a.running += running
	a.waiting += waiting
}

// beginStep starts composing a step's batch.
func (l *loraState) beginStep() {
	l.step++
	l.batch = l.batch[:0]
}

// admits reports whether a request of adapter id may join the batch
// under the MaxLoras rule (vLLM: len(scheduled_loras) == max_loras and
// the request's adapter is not among them means skip).
func (l *loraState) admits(id int32) bool {
	return id == 0 || len(l.batch) < l.cfg.MaxLoras || l.ad[id].mark == l.step
}

// join adds adapter id to the batch.
func (l *loraState) join(id int32) {
	if id == 0 || l.ad[id].mark == l.step {
		return
	}
	l.ad[id].mark = l.step
	l.batch = append(l.batch, id)
}

// load makes every adapter of the batch resident in a GPU slot and
// returns what that adds to the step. The batch's resident adapters are
// used first, so that eviction never takes one of them.
func (l *loraState) load() time.Duration {
	for _, id := range l.batch {
		if l.ad[id].inCPU {
			l.clock++
			l.ad[id].used = l.clock
		}
	}
	var total time.Duration
	for _, id := range l.batch {
		a := &l.ad[id]
		a.stepCost = 0
		if !a.inCPU {
			if len(l.cpu) == l.cfg.MaxCPULoras {
				l.evictCPU()
			}
			l.cpu = append(l.cpu, id)
			a.inCPU = true
			l.clock++
			a.used = l.clock
			a.stepCost += l.cfg.LoadTime
		}
		if !a.inGPU {
			if len(l.gpu) == l.cfg.MaxLoras {
				l.gpu = deleteLRU(l.ad, l.gpu)
			}
			l.gpu = append(l.gpu, id)
			a.inGPU = true
			a.stepCost += l.cfg.ActivateTime
		}
		total += a.stepCost
	}
	return total
}

// evictCPU drops the least recently used adapter of the CPU cache, and
// from its GPU slot too.
func (l *loraState) evictCPU() {
	i := lruIndex(l.ad, l.cpu)
	id := l.cpu[i]
	l.cpu = slices.Delete(l.cpu, i, i+1)
	l.ad[id].inCPU = false
	if j := slices.Index(l.gpu, id); j >= 0 {
		l.gpu = slices.Delete(l.gpu, j, j+1)
		l.ad[id].inGPU = false
	}
}

// deleteLRU removes the least recently used adapter of the GPU slots ids.
func deleteLRU(ad []adapter, ids []int32) []int32 {
	i := lruIndex(ad, ids)
	ad[ids[i]].inGPU = false
	return slices.Delete(ids, i, i+1)
}

// lruIndex is the index in ids of the least recently used adapter.
func lruIndex(ad []adapter, ids []int32) int {
	best := 0
	for i, id := range ids {
		if ad[id].used < ad[ids[best]].used {
			best = i
		}
	}
	return best
}

// reset forgets every request count and empties both caches (a failed
// replica); the registry stays.
func (l *loraState) reset() {
	for i := range l.ad {
		a := &l.ad[i]
		a.running, a.waiting, a.inCPU, a.inGPU = 0, 0, false, false
	}
	l.batch, l.gpu, l.cpu = l.batch[:0], l.gpu[:0], l.cpu[:0]
	clear(l.skipped)
	l.skipped = l.skipped[:0]
}

// Adapters returns what vLLM reports of the replica's LoRA adapters: the
// requests of each adapter, running and waiting, and MaxLoras. The
// adapters are appended to buf[:0]. It does not allocate when buf has
// room; it takes time linear in the number of adapters ever submitted.
func (r *Replica) Adapters(buf []AdapterLoad) LoRALoad {
	l := &r.lora
	buf = buf[:0]
	for i := 1; i < len(l.ad); i++ {
		if a := &l.ad[i]; a.running+a.waiting > 0 {
			buf = append(buf, AdapterLoad{Name: a.name, Running: a.running, Waiting: a.waiting})
		}
	}
	slices.SortFunc(buf, func(x, y AdapterLoad) int {
		return cmp.Compare(l.ad[l.ids[x.Name]].since, l.ad[l.ids[y.Name]].since)
	})
	return LoRALoad{MaxLoras: l.cfg.MaxLoras, Adapters: buf}
}

// AdapterCache returns the adapters in GPU slots and those in the CPU
// cache, most recently used first (a diagnostic: what the next steps
// will not have to load).
func (r *Replica) AdapterCache() (gpu, cpu []string) {
	l := &r.lora
	names := func(ids []int32) []string {
		ids = slices.Clone(ids)
		slices.SortFunc(ids, func(x, y int32) int { return cmp.Compare(l.ad[y].used, l.ad[x].used) })
		out := make([]string, len(ids))
		for i, id := range ids {
			out[i] = l.ad[id].name
		}
		return out
	}
	return names(l.gpu), names(l.cpu)
}

// LoRA returns the replica's LoRA options, defaults applied.
func (r *Replica) LoRA() LoRA { return r.lora.cfg }
