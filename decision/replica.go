package decision

import (
	"slices"

	"github.com/ilbproject/ilb/picker"
)

// ReplicaDecision is the replica ILB chose inside the chosen cluster, and
// why (clusters with replica_picking on).
type ReplicaDecision struct {
	// Chosen is the replica (host:port); "" when ILB left the choice to
	// Envoy (Skipped says why).
	Chosen string `json:"chosen,omitempty"`
	// Hosts is the override-host list sent to Envoy: Chosen, then the
	// replicas a retry takes.
	Hosts []string `json:"hosts,omitempty"`
	// Reason: prefix, session, load or only (package picker).
	Reason string `json:"reason,omitempty"`
	// PromptBlocks is how many hashes of the prompt's chain were taken
	// (picker.AppendBlocks: one per 256-byte block for the first 512,
	// then one per 2 KiB; at most picker.MaxBlocks).
	PromptBlocks int `json:"prompt_blocks"`
	// Terms are the chosen replica's: cached prefix, load, cost.
	Terms picker.Term `json:"terms"`
	// RunnerUp is the second best, and Lost why it was not chosen:
	// more_work (more work there) or tie (equal work; more
	// in flight, saturated, or later in rotation).
	RunnerUp *picker.Term `json:"runner_up,omitempty"`
	Lost     string       `json:"runner_up_lost,omitempty"`
	// Skipped says why ILB chose no replica: Envoy's least request did.
	Skipped string `json:"skipped,omitempty"`
	// Served is set from the response: "chosen" when Envoy's upstream
	// host is Chosen, "other" when it is another (a retry took the next
	// host, or Envoy fell back because the host had left its cluster).
	Served string `json:"served,omitempty"`
}

// size is the record memory the decision adds.
func (d *ReplicaDecision) size() int {
	n := 128 + len(d.Chosen) + len(d.Reason) + len(d.Lost) + len(d.Skipped) + len(d.Terms.Address)
	for _, h := range d.Hosts {
		n += 16 + len(h)
	}
	if d.RunnerUp != nil {
		n += 96 + len(d.RunnerUp.Address)
	}
	return n
}

// replicaEntry is a replica decision as the log keeps it: its strings
// interned (replica addresses and picker codes repeat in every record),
// its terms as numbers. A third of a ReplicaDecision with its host list
// and runner-up.
type replicaEntry struct {
	terms, runnerUp                       compactTerm
	promptBlocks                          int32
	hosts                                 [maxHosts]uint16
	nHosts                                uint8
	hasRunnerUp                           bool
	chosen, reason, lost, skipped, served uint16
}

// maxHosts is the most hosts a compact replica decision lists (the
// picker's override-host list has three).
const maxHosts = 3

// compactTerm is a picker.Term with its address interned.
type compactTerm struct {
	addr               uint16
	session, saturated bool
	adapter            uint8 // index in adapterTiers
	inFlight           int32
	cached, awaiting   int64
	decode, cost       float64
}

// encodeReplica is d as the log keeps it, interning in in; ok is false
// when it cannot be (a string the table has no room for, a longer host
// list): the log then keeps d itself. like is another compact decision
// of the log (nil: none), whose codes are tried first (codeHinted): the
// same replicas and reasons come back request after request.
func encodeReplica(d *ReplicaDecision, in *interner, like *replicaEntry) (r *replicaEntry, ok bool) {
	if len(d.Hosts) > maxHosts {
		return nil, false
	}
	var h replicaEntry // like's codes, or none
	if like != nil {
		h = *like
	}
	addrs := [...]uint16{h.chosen, h.hosts[0], h.hosts[1], h.hosts[2], h.terms.addr, h.runnerUp.addr}
	r = &replicaEntry{promptBlocks: int32(min(max(d.PromptBlocks, 0), 1<<31-1)), nHosts: uint8(len(d.Hosts))}
	codes := [...]*uint16{&r.chosen, &r.reason, &r.lost, &r.skipped, &r.served}
	hints := [...]uint16{h.chosen, h.reason, h.lost, h.skipped, h.served}
	for i, s := range [...]string{d.Chosen, d.Reason, d.Lost, d.Skipped, d.Served} {
		if *codes[i] = in.codeHinted(s, hints[i]); *codes[i] == codeInline {
			return nil, false
		}
	}
	for i, host := range d.Hosts {
		if r.hosts[i] = in.codeHinted(host, addrs[:]...); r.hosts[i] == codeInline {
			return nil, false
		}
	}
	if r.terms, ok = compact(d.Terms, in, addrs[:]); !ok {
		return nil, false
	}
	if d.RunnerUp != nil {
		if r.runnerUp, ok = compact(*d.RunnerUp, in, addrs[:]); !ok {
			return nil, false
		}
		r.hasRunnerUp = true
	}
	return r, true
}

// servedUpdate is d as the log keeps it when d is was, the decision prev
// encoded, but for Served — a copy the response wrote on (which replica
// served): prev's compact decision with d's Served, without encoding the
// rest again. nil when that does not apply (encode d whole).
func servedUpdate(prev *entry, was, d *ReplicaDecision, in *interner) *replicaEntry {
	if prev == nil || prev.rep == nil || was == nil || !servedOnly(was, d) {
		return nil
	}
	served := in.codeHinted(d.Served, prev.rep.served)
	if served == codeInline {
		return nil
	}
	rep := *prev.rep
	rep.served = served
	return &rep
}

// servedOnly reports whether b is a but for Served. Hosts and RunnerUp
// compare by value.
func servedOnly(a, b *ReplicaDecision) bool {
	return a.Chosen == b.Chosen && a.Reason == b.Reason && a.PromptBlocks == b.PromptBlocks && a.Terms == b.Terms &&
		a.Lost == b.Lost && a.Skipped == b.Skipped && slices.Equal(a.Hosts, b.Hosts) &&
		(a.RunnerUp == b.RunnerUp || a.RunnerUp != nil && b.RunnerUp != nil && *a.RunnerUp == *b.RunnerUp)
}

// adapterTiers are the values of picker.Term.Adapter, by compactTerm.adapter.
var adapterTiers = [...]string{"", picker.AdapterLoaded, picker.AdapterBusy, picker.AdapterCached, picker.AdapterSlot, picker.AdapterFull, picker.AdapterSpread, picker.AdapterSlotWait}

// compact is t as the log keeps it; addrs are codes to try first for its
// address (codeHinted).
func compact(t picker.Term, in *interner, addrs []uint16) (compactTerm, bool) {
	tier := slices.Index(adapterTiers[:], t.Adapter)
	if tier < 0 {
		return compactTerm{}, false
	}
	c := compactTerm{
		adapter: uint8(tier),
		addr:    in.codeHinted(t.Address, addrs...), session: t.Session, saturated: t.Saturated,
		inFlight: int32(min(max(t.InFlight, 0), 1<<31-1)), cached: int64(t.Cached), awaiting: t.Awaiting, decode: t.Decode, cost: t.Cost,
	}
	return c, c.addr != codeInline
}

// str is the string of an interned code (codeEmpty: "").
func (in *interner) str(c uint16) string {
	if c < codeFirst {
		return ""
	}
	return in.value(c)
}

func (c compactTerm) term(in *interner) picker.Term {
	return picker.Term{
		Address: in.str(c.addr), Session: c.session, Saturated: c.saturated, Adapter: adapterTiers[c.adapter],
		InFlight: int(c.inFlight), Cached: int(c.cached), Awaiting: c.awaiting, Decode: c.decode, Cost: c.cost,
	}
}

// decode is the ReplicaDecision r keeps.
func (r *replicaEntry) decode(in *interner) *ReplicaDecision {
	d := &ReplicaDecision{
		Chosen: in.str(r.chosen), Reason: in.str(r.reason), Lost: in.str(r.lost), Skipped: in.str(r.skipped), Served: in.str(r.served),
		PromptBlocks: int(r.promptBlocks), Terms: r.terms.term(in),
	}
	for _, h := range r.hosts[:r.nHosts] {
		d.Hosts = append(d.Hosts, in.str(h))
	}
	if r.hasRunnerUp {
		t := r.runnerUp.term(in)
		d.RunnerUp = &t
	}
	return d
}
