package picker

import "slices"

// Adapters is what a replica's engine reported of its LoRA adapters at
// its last scrape (vLLM's vllm:lora_requests_info).
type Adapters struct {
	// Known: the engine reports them (LoRA enabled, metrics fresh).
	Known bool
	// Running and Waiting are the adapters of its running and waiting
	// requests, sorted.
	Running, Waiting []string
	// Max is its max_lora: the most adapters one batch may use, and its
	// GPU adapter slots; 0 when unknown.
	Max int
}

// Where a request for an adapter may go, best first (Term.Adapter,
// Decision.Adapter).
const (
	// AdapterLoaded: the replica has the adapter in a GPU slot, as far as
	// ILB can tell — its engine reported requests of it running or
	// waiting at its last scrape, or it is among the last max_lora
	// adapters ILB sent there (the engine's slots are an LRU cache) — and
	// is not saturated.
	AdapterLoaded = "loaded"
	// AdapterCached: ILB sent the adapter there before, further back (the
	// engine likely holds it in its CPU cache, --max-cpu-loras: a copy
	// into a slot, not a load from disk), and the replica is not
	// saturated, whether a slot is free or the request waits for one.
	// A load from disk stalls every request of the engine's step (vLLM
	// loads adapters in the step, before the forward pass), and placing
	// the adapter on one more replica evicts another from that replica's
	// CPU cache: placed wherever a slot was free, the tail adapters
	// spread over most replicas (29–56 adapters seen per replica, for a
	// 16-adapter CPU cache), and a tenth of their requests (a quarter
	// of the rarest's) loaded from disk (LoRA benchmark at load 0.9, seed 1: 3,092 loads from disk in
	// 10 minutes; waiting for a slot where they were cached, 9–17
	// adapters per replica and 178 loads).
	AdapterCached = "cached"
	// AdapterSlot: the replica may take the adapter now: it has it but is
	// saturated, or it has fewer adapters in use than its max_lora (or
	// an unknown max_lora).
	AdapterSlot = "free_slot"
	// AdapterFull: every adapter slot of the replica is in use by other
	// adapters: the request would wait there until one frees.
	AdapterFull = "full"
)

var adapterTiers = [...]string{AdapterLoaded, AdapterCached, AdapterSlot, AdapterFull}

// adapterTier is how well a replica suits a request for adapter, an
// index in adapterTiers (0 best). Under mu.
func (st *replicaState) adapterTier(cand Replica, adapter string) int {
	rep := cand.Adapters
	slots := max(rep.Max, 1) // vLLM's default max_loras is 1
	recent := slices.Index(st.recentAdapters, adapter)
	has := st.adapters[adapter] > 0 || recent >= 0 && recent < slots
	if rep.Known {
		_, run := slices.BinarySearch(rep.Running, adapter)
		_, wait := slices.BinarySearch(rep.Waiting, adapter)
		has = has || run || wait
	}
	switch {
	case has && !cand.Saturated:
		return 0
	case has:
		return 2
	}
	free := !rep.Known || rep.Max <= 0 // no report: nothing says its slots are taken
	if !free {
		// Adapters in use: those the engine runs, and those of ILB's
		// requests sent since its scrape (which it could not count yet).
		inUse := len(rep.Running)
		for _, a := range st.sentAdapters {
			if _, ok := slices.BinarySearch(rep.Running, a); !ok {
				inUse++
			}
		}
		free = inUse < rep.Max
	}
	switch {
	case recent >= 0 && !cand.Saturated:
		return 1
	case !free:
		return 3
	}
	return 2
}

// noteAdapter records that a request for adapter was sent to the replica:
// in flight until its Ticket is done, sent since the last scrape, and the
// most recent in its LRU. Under mu.
func (st *replicaState) noteAdapter(adapter string) {
	if st.adapters == nil {
		st.adapters = map[string]int{}
	}
	st.adapters[adapter]++
	if !slices.Contains(st.sentAdapters, adapter) && len(st.sentAdapters) < maxSentAdapters {
		st.sentAdapters = append(st.sentAdapters, adapter)
	}
	i := slices.Index(st.recentAdapters, adapter)
	if i < 0 {
		if len(st.recentAdapters) < maxSentAdapters {
			st.recentAdapters = append(st.recentAdapters, "")
		}
		i = len(st.recentAdapters) - 1
	}
	copy(st.recentAdapters[1:i+1], st.recentAdapters[:i])
	st.recentAdapters[0] = adapter
}

// maxSentAdapters bounds the adapters remembered per replica (sent since
// its last scrape, and recently).
const maxSentAdapters = 64

// doneAdapter ends a request for adapter on the replica. Under mu.
func (st *replicaState) doneAdapter(adapter string) {
	if n := st.adapters[adapter]; n > 1 {
		st.adapters[adapter] = n - 1
	} else {
		delete(st.adapters, adapter)
	}
}
