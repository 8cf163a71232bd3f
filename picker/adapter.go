package picker

import (
	"math"
	"slices"
)

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
// Decision.Adapter). AdapterLoaded and AdapterSpread are one tier, and
// AdapterBusy and AdapterCached another: the cost rule decides within a
// tier. AdapterSlotWait ranks between those two.
const (
	// AdapterLoaded: the replica has the adapter in a GPU slot, as far as
	// ILB can tell — its engine reported requests of it running or
	// waiting at its last scrape, or it is among the last max_lora
	// adapters ILB sent there (the engine's slots are an LRU cache) —, is
	// not saturated, and its batch did not run max_lora other adapters at
	// that scrape (see AdapterSlotWait).
	AdapterLoaded = "loaded"
	// AdapterSpread: the replica has a free adapter slot and is not
	// saturated, and a replica holding the adapter is compute-bound — its
	// engine reports requests waiting, and runs every adapter they are of
	// (they wait for the batch, not for an adapter slot) — while either
	// the adapter asks for more replicas than hold it (its share of the
	// cluster's recent requests × the candidates) or that holder's queue
	// lasts (Replica.QueueLasting), whatever the adapter's share. It then
	// ranks with the holders, by cost: a holder with compute to spare
	// still costs less.
	// A lasting queue is a holder that admits less than comes (its batch
	// at max_num_seqs, its KV cache full, or its token budget taken by
	// long prefills for a second or more), whatever the share of each
	// adapter it holds: one replica, sole holder of 14 adapters
	// none of which asked for a second replica, ran its engine's
	// max_num_seqs (256) with requests waiting (up to 56) at 287 of its
	// 299 scrapes from 300 to 600 s, TTFT 1–2 s, while the other five ran
	// about 100 with none waiting (LoRA benchmark, 16 slots, load 1.1,
	// seed 3). Spreading off such a holder served 3–11% more at 1.1 and
	// 1.3 with 16 slots and with Zipf 1.3 on seeds 4–9 (1.4–6.2% on seeds
	// 1–3), and at most 0.5% less elsewhere; its cost is the median past
	// saturation, every replica queueing a little rather than one a lot
	// (16 slots at 1.3: 0.138 → 0.216 s). Counting a lasting queue that
	// shrank (draining) served 0.5% less with 8 slots at 0.9–1.1 and 1.7%
	// less with Zipf 0.8 at 1.1; spreading off any holder reporting a
	// queue at its last scrape, lasting or not, 1.5% less with 8 slots at
	// 0.9 and 3.4% less with Zipf 0.8 at 1.1.
	AdapterSpread = "spread"
	// AdapterSlotWait: the replica has the adapter's requests, as far as
	// ILB can tell, but its engine ran max_lora other adapters at its last
	// scrape: a batch uses at most max_lora adapters, so this one's
	// requests there wait for a slot (vLLM's scheduler skips them while
	// the batch's adapters fill it). It ranks below a replica that runs the
	// adapter or may take it now (AdapterLoaded, AdapterSpread), and above
	// the replicas that would load it (the adapter's requests already
	// waiting there run together when it is loaded).
	// Ranked as loaded (its requests were listed there), a third of the
	// requests that went past a replica holding their adapter with
	// headroom went where the last scrape showed every slot taken by
	// other adapters: 94 of 274 (LoRA benchmark, 8 slots, loads 0.3–1.3,
	// seeds 1–3); ranked here, 188 went past, none so. Ranked with
	// AdapterCached instead, the adapter scattered over the replicas that
	// had it in CPU memory: with 2 slots that served 2–3% less at 0.7
	// and 1.3.
	AdapterSlotWait = "slot_wait"
	// AdapterBusy: the replica has the adapter but is saturated, and the
	// adapter does not spread (see AdapterSpread: none of the replicas
	// that have it is compute-bound, or they are no fewer than its share
	// of the cluster's recent requests asks for and no compute-bound one's
	// queue lasts): its requests wait there rather than load it on one
	// more replica.
	// Ranked with free slots instead, a saturated replica's adapter went
	// to whichever replica had a slot, which loaded it and evicted
	// another; with 4 adapter slots, where most replicas are saturated,
	// that sent 0.9–2.2% of adapter requests past a replica holding
	// theirs and served 17–21% less than the GIE-style scorer (LoRA
	// benchmark at 0.5–0.9).
	AdapterBusy = "busy"
	// AdapterCached: ILB sent the adapter there before, further back but
	// among the last Options.MaxCPULoras distinct adapters it sent it (the
	// engine likely holds it in its CPU cache, --max-cpu-loras, an LRU: a
	// copy into a slot, not a load from disk), and the replica is not
	// saturated, whether a slot is free or the request waits for one.
	// Taken from the last 64 where engines kept 8 (--max-loras 4), a
	// tenth of the requests so placed loaded from disk: 25 ms of adapter
	// loading per request against 18 with the last 8.
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
	// saturated while the adapter spreads (see AdapterSpread: a hot
	// adapter spreads over as many replicas as its load takes), or it has
	// fewer adapters in use than its max_lora (or an unknown max_lora).
	AdapterSlot = "free_slot"
	// AdapterFull: every adapter slot of the replica is in use by other
	// adapters: the request would wait there until one frees.
	AdapterFull = "full"
)

// adapterTiers are the tiers' names by index (0 best); tier 0 is also
// AdapterSpread, tier 2 AdapterCached or AdapterBusy.
var adapterTiers = [...]string{AdapterLoaded, AdapterSlotWait, AdapterCached, AdapterSlot, AdapterFull}

// holds reports whether the replica has adapter in a GPU slot, as far as
// ILB can tell (see AdapterLoaded). Under mu.
func (st *replicaState) holds(cand Replica, adapter string) bool {
	rep := cand.Adapters
	slots := max(rep.Max, 1) // vLLM's default max_loras is 1
	recent := slices.Index(st.recentAdapters, adapter)
	has := st.adapters[adapter] > 0 || recent >= 0 && recent < slots
	if rep.Known {
		_, run := slices.BinarySearch(rep.Running, adapter)
		_, wait := slices.BinarySearch(rep.Waiting, adapter)
		has = has || run || wait
	}
	return has
}

// adapterTier is how well a replica suits a request for adapter: an
// index in adapterTiers (0 best) and the tier's name. spread: the adapter
// asks for more replicas than hold it, and one of those is compute-bound
// (see AdapterSpread); cpu: the
// adapters its engine keeps in CPU memory (Options.MaxCPULoras). Under
// mu.
func (st *replicaState) adapterTier(cand Replica, adapter string, spread bool, cpu int) (int, string) {
	rep := cand.Adapters
	switch has := st.holds(cand, adapter); {
	case has && slotBound(rep, adapter):
		return 1, AdapterSlotWait
	case has && !cand.Saturated:
		return 0, AdapterLoaded
	case has && !spread:
		return 2, AdapterBusy
	case has:
		return 3, AdapterSlot
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
	case spread && free && !cand.Saturated:
		return 0, AdapterSpread
	case slices.Contains(st.recentAdapters[:min(cpu, len(st.recentAdapters))], adapter) && !cand.Saturated:
		return 2, AdapterCached
	case !free:
		return 4, AdapterFull
	}
	return 3, AdapterSlot
}

// slotBound reports whether the engine's report shows every adapter slot
// of its batch taken by other adapters: it ran max_lora adapters, and
// not this one (see AdapterSlotWait).
func slotBound(rep Adapters, adapter string) bool {
	if !rep.Known || rep.Max <= 0 || len(rep.Running) < rep.Max {
		return false
	}
	_, run := slices.BinarySearch(rep.Running, adapter)
	return !run
}

// computeBound reports whether the engine's report shows requests
// waiting for its batch and none for an adapter slot: it lists waiting
// adapters, and runs every one of them (see AdapterSpread).
func computeBound(rep Adapters) bool {
	if !rep.Known || len(rep.Waiting) == 0 {
		return false
	}
	for _, a := range rep.Waiting {
		if _, ok := slices.BinarySearch(rep.Running, a); !ok {
			return false
		}
	}
	return true
}

// adapterShares follows each adapter's share of a cluster's recent
// requests (the base model's as ""): each request counts
// 2^(1/adapterHalfLife) times the one before, so the shares are those of
// about the last adapterHalfLife requests. At most maxAdapterShares
// adapters are followed; a request of another counts in the total only
// (its share reads 0: it never spills off a busy replica holding it).
// Under the cluster's mu.
type adapterShares struct {
	weight map[string]float64
	total  float64
	scale  float64 // weight of the next request
}

const (
	adapterHalfLife  = 1024
	maxAdapterShares = 4096
)

var adapterGrowth = math.Exp2(1.0 / adapterHalfLife)

// add counts one request of adapter.
func (a *adapterShares) add(adapter string) {
	if a.weight == nil {
		a.weight, a.scale = map[string]float64{}, 1
	}
	if _, ok := a.weight[adapter]; ok || len(a.weight) < maxAdapterShares {
		a.weight[adapter] += a.scale
	}
	a.total += a.scale
	a.scale *= adapterGrowth
	if a.scale > 0x1p64 { // rescale: weights stay finite, shares exact
		for k, v := range a.weight {
			a.weight[k] = v / a.scale
		}
		a.total /= a.scale
		a.scale = 1
	}
}

// share is adapter's share of the recent requests, in [0, 1].
func (a *adapterShares) share(adapter string) float64 {
	if !(a.total > 0) {
		return 0
	}
	return min(a.weight[adapter]/a.total, 1)
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
