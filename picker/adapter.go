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
	// Max is its max_lora: the most adapters one batch may use; 0 when
	// unknown.
	Max int
}

// Where a request for an adapter may go, best first (Term.Adapter,
// Decision.Adapter).
const (
	// AdapterLoaded: the replica has the adapter — its engine reported
	// requests of it running or waiting at its last scrape, or ILB sent it
	// some since, or has some in flight there — and is not saturated.
	AdapterLoaded = "loaded"
	// AdapterSlot: the replica may take the adapter now: it has it but is
	// saturated, or it has fewer adapters in use than its max_lora (or an
	// unknown max_lora).
	AdapterSlot = "free_slot"
	// AdapterFull: every adapter slot of the replica is in use by other
	// adapters: the request would wait there until one frees.
	AdapterFull = "full"
)

// adapterTier is how well a replica suits a request for adapter (0 best:
// AdapterLoaded, AdapterSlot, AdapterFull). Under mu.
func (st *replicaState) adapterTier(cand Replica, adapter string) int {
	has := st.adapters[adapter] > 0 || slices.Contains(st.sentAdapters, adapter)
	rep := cand.Adapters
	if rep.Known {
		_, run := slices.BinarySearch(rep.Running, adapter)
		_, wait := slices.BinarySearch(rep.Waiting, adapter)
		has = has || run || wait
	}
	switch {
	case has && !cand.Saturated:
		return 0
	case has:
		return 1
	case !rep.Known || rep.Max <= 0:
		return 1 // no report: nothing says its slots are taken
	}
	// Adapters in use: those the engine runs, and those of ILB's requests
	// sent since its scrape (which it could not count yet).
	inUse := len(rep.Running)
	for _, a := range st.sentAdapters {
		if _, ok := slices.BinarySearch(rep.Running, a); !ok {
			inUse++
		}
	}
	if inUse < rep.Max {
		return 1
	}
	return 2
}

var adapterTiers = [...]string{AdapterLoaded, AdapterSlot, AdapterFull}

// noteAdapter records that a request for adapter was sent to the replica:
// in flight until its Ticket is done, and sent since the last scrape.
// Under mu.
func (st *replicaState) noteAdapter(adapter string) {
	if st.adapters == nil {
		st.adapters = map[string]int{}
	}
	st.adapters[adapter]++
	if !slices.Contains(st.sentAdapters, adapter) && len(st.sentAdapters) < maxSentAdapters {
		st.sentAdapters = append(st.sentAdapters, adapter)
	}
}

// maxSentAdapters bounds the adapters remembered as sent to one replica
// since its last scrape.
const maxSentAdapters = 64

// doneAdapter ends a request for adapter on the replica. Under mu.
func (st *replicaState) doneAdapter(adapter string) {
	if n := st.adapters[adapter]; n > 1 {
		st.adapters[adapter] = n - 1
	} else {
		delete(st.adapters, adapter)
	}
}
