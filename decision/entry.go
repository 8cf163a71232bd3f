package decision

import (
	"encoding/binary"
	"maps"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// entry is a record as the log keeps it: its numbers as they are, its
// strings either interned (a code into the log's table: the values ILB
// chose — sources, models, priorities, reasons, versions, clusters,
// hosts — which repeat in every record) or inline in one byte slice
// (request ids, paths, hashes, explanations), and what records share by
// pointer (the candidates, the replica decision, generation). A
// routed request's entry is about a third of a Record; readers decode a
// Record from it (decode), filters and tallies read fields in place.
type entry struct {
	seq, draw                                         uint64
	start                                             int64 // unix nanoseconds (0: zero time)
	tokenCost, demandBooked, shedWaived, shedWaivedAt float64
	shedWaivedScale                                   float64
	text                                              string           // the inline strings, in field order, each a uvarint length and its bytes
	candidates                                        []Candidate      // shared with every version and reader: never changed
	replica                                           *ReplicaDecision // one without a choice (ext_proc shares them), or one rep cannot hold; never changed once stored (writers copy)
	rep                                               *replicaEntry    // the replica decision, compact
	generated                                         *Generated
	slot, totalWeight                                 uint32
	decisionMicros, totalMicros                       int32 // totalMicros: Record.TotalMillis × 1000 (it is whole microseconds)
	size                                              int32 // the estimate the log counts
	maxTokens, promptTokens, status                   int32
	tenant                                            *[3]float64        // TenantDemand, TenantFair, TenantShed; nil when all are 0 (most records)
	codes                                             [numStrings]uint16 // per string field: codeInline, codeEmpty or an interned code
	flags                                             uint8
}

const (
	flagStream = 1 << iota
	flagMismatch
	flagComplete
)

// String fields of a record, in the order of Record.strings.
const (
	strRequestID = iota
	strSource
	strMethod
	strPath
	strRequestedModel
	strModel
	strPriority
	strPriorityFrom
	strSessionHash
	strSessionFrom
	strModelFrom
	strTraceID
	strSpanID
	strWeightsVersion
	strDrawFrom
	strChosen
	strRedrawn
	strReason
	strServedCluster
	strServedVersion
	strUpstreamHost
	strUnanswered
	strTenant
	strTenantFrom
	strAdapter
	numStrings
)

// interned marks the string fields whose values repeat: names from the
// configuration, ILB's own codes, weights versions, replica addresses.
// The others (ids, paths, hashes, explanations) are inline.
var interned = [numStrings]bool{
	strSource: true, strMethod: true, strRequestedModel: true, strModel: true, strPriority: true,
	strPriorityFrom: true, strSessionFrom: true, strModelFrom: true, strWeightsVersion: true,
	strDrawFrom: true, strChosen: true, strReason: true, strServedCluster: true,
	strServedVersion: true, strUpstreamHost: true, strTenantFrom: true, strAdapter: true,
}

// Codes of entry.codes.
const (
	codeInline = 0 // in entry.text
	codeEmpty  = 1 // ""
	codeFirst  = 2 // interned value codeFirst + i: table entry i
)

// strings returns pointers to r's string fields, in field order.
func (r *Record) strings() [numStrings]*string {
	return [numStrings]*string{
		&r.RequestID, &r.Source, &r.Method, &r.Path, &r.RequestedModel, &r.Model, &r.Priority, &r.PriorityFrom,
		&r.SessionHash, &r.SessionFrom, &r.ModelFrom, &r.TraceID, &r.SpanID, &r.WeightsVersion, &r.DrawFrom,
		&r.Chosen, &r.Redrawn, &r.Reason, &r.ServedCluster, &r.ServedVersion, &r.UpstreamHost, &r.Unanswered,
		&r.Tenant, &r.TenantFrom, &r.Adapter,
	}
}

// internCap bounds the values a log interns: a configuration's names,
// codes, recent versions and replica addresses fit many times over. Past
// it, new values go inline, so values a client chooses (a model name it
// asks for) cannot grow the table.
const internCap = 4096

// interner is a log's table of interned strings. Lookups take no lock
// and no allocation: they read an immutable map behind an atomic
// pointer. A new value takes a short lock and replaces the map with a
// copy holding it (at most internCap copies over a log's life: values
// are never removed).
type interner struct {
	codes atomic.Pointer[map[string]uint16]
	mu    sync.Mutex
	n     int // values, under mu
	vals  [internCap]atomic.Pointer[string]
}

// maxInterned is the longest string interned: names, codes, versions
// and addresses are shorter; a longer value goes inline, where it counts
// against the log's byte bound.
const maxInterned = 64

// code returns s's code, interning it when there is room; codeInline
// when there is none or s is longer than maxInterned.
func (in *interner) code(s string) uint16 {
	if s == "" {
		return codeEmpty
	}
	if len(s) > maxInterned {
		return codeInline
	}
	if m := in.codes.Load(); m != nil {
		if c, ok := (*m)[s]; ok {
			return c
		}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	old := in.codes.Load()
	if old != nil {
		if c, ok := (*old)[s]; ok {
			return c
		}
	}
	if in.n == internCap {
		return codeInline
	}
	c := uint16(codeFirst + in.n)
	v := strings.Clone(s) // s may be a view of a buffer the caller reuses
	in.vals[in.n].Store(&v)
	in.n++
	m := make(map[string]uint16, in.n)
	if old != nil {
		maps.Copy(m, *old)
	}
	m[v] = c
	in.codes.Store(&m)
	return c
}

// value is the string of code c (codeFirst or more).
func (in *interner) value(c uint16) string { return *in.vals[c-codeFirst].Load() }

// codeHinted is code(s), trying hints first: codes (of this interner, or
// codeInline and codeEmpty, which are skipped) of values s is likely to
// be — what the same field of the last record kept holds. A hint is
// compared, where code hashes s and looks it up: most of a record's
// values repeat the last one's.
func (in *interner) codeHinted(s string, hints ...uint16) uint16 {
	if s == "" {
		return codeEmpty
	}
	for _, h := range hints {
		if h >= codeFirst && in.value(h) == s {
			return h
		}
	}
	return in.code(s)
}

// entryOverhead is an entry's fixed memory: the struct, its ring slot
// and an allocator's rounding; candidateOverhead one candidate's, counted
// whole for every record although versions and readers share them (the
// log's byte bound stays a bound).
const (
	entryOverhead     = int(unsafe.Sizeof(entry{})) + 16
	candidateOverhead = int(unsafe.Sizeof(Candidate{}))
	generatedSize     = int(unsafe.Sizeof(Generated{}))
	replicaEntrySize  = int(unsafe.Sizeof(replicaEntry{}))
)

// encode is r as the log keeps it, interning in in; prev is the entry of
// r's previous version (nil: none), whose codes serve again for the
// strings that did not change.
func encode(r *Record, in *interner, prev *entry) *entry { return encodeHinted(r, in, prev, nil) }

// encodeHinted is encode with hint, another entry of the log (nil:
// none), usually the newest: its codes are tried before any lookup for
// the values they stand for (interner.codeHinted). The entry is the same
// with any hint.
func encodeHinted(r *Record, in *interner, prev, hint *entry) *entry {
	e := &entry{
		seq: r.Seq, draw: r.Draw, slot: clamp32u(r.Slot), totalWeight: clamp32u(r.TotalWeight),
		decisionMicros: clamp32(r.DecisionMicros), totalMicros: clamp32(int64(math.Round(r.TotalMillis * 1000))),
		tokenCost: r.TokenCost, demandBooked: r.DemandBooked, shedWaived: r.ShedWaived, shedWaivedAt: r.ShedWaivedFirstToken, shedWaivedScale: r.ShedWaivedScale,
		maxTokens: clamp32(int64(r.MaxTokens)), promptTokens: clamp32(int64(r.PromptTokens)),
		status: clamp32(int64(r.Status)), candidates: r.Candidates, generated: r.Generated,
	}
	if r.TenantDemand != 0 || r.TenantFair != 0 || r.TenantShed != 0 {
		switch {
		case prev != nil && prev.tenant != nil && *prev.tenant == [3]float64{r.TenantDemand, r.TenantFair, r.TenantShed}:
			e.tenant = prev.tenant
		default:
			e.tenant = &[3]float64{r.TenantDemand, r.TenantFair, r.TenantShed}
		}
	}
	switch d := r.Replica; {
	case d == nil:
	case d.Chosen == "":
		e.replica = d // shared
	case prev != nil && prev.rep != nil && d == r.repEncoded:
		e.rep = prev.rep // unchanged since the last version
	default:
		var like *replicaEntry // the codes to try first
		if hint != nil {
			like = hint.rep
		}
		if e.rep = servedUpdate(prev, r.repEncoded, d, in); e.rep == nil {
			if e.rep, _ = encodeReplica(d, in, like); e.rep == nil {
				e.replica = d
			}
		}
		r.repEncoded = d
	}
	if !r.Start.IsZero() {
		e.start = r.Start.UnixNano()
	}
	if r.Stream {
		e.flags |= flagStream
	}
	if r.Mismatch {
		e.flags |= flagMismatch
	}
	if r.Complete {
		e.flags |= flagComplete
	}
	strs := r.strings()
	n := 0
	for i, p := range strs {
		switch {
		case *p == "":
			e.codes[i] = codeEmpty
		case interned[i]:
			var was, like uint16 // codeInline: no hint
			if prev != nil {
				was = prev.codes[i]
			}
			if hint != nil {
				like = hint.codes[i]
			}
			e.codes[i] = in.codeHinted(*p, was, like)
		}
		if e.codes[i] == codeInline {
			n += uvarintLen(len(*p)) + len(*p)
		}
	}
	switch {
	case n == 0:
	case prev != nil && len(prev.text) == n && sameInline(prev, e, &strs):
		e.text = prev.text // an update that changed no inline string
	default:
		text := make([]byte, 0, n)
		for i, p := range strs {
			if e.codes[i] == codeInline {
				text = binary.AppendUvarint(text, uint64(len(*p)))
				text = append(text, *p...)
			}
		}
		e.text = unsafe.String(unsafe.SliceData(text), len(text)) // text is never written again
	}
	size := entryOverhead + len(e.text) + len(e.candidates)*candidateOverhead
	for _, c := range e.candidates {
		size += len(c.Cluster) + len(c.Excluded)
	}
	if e.replica != nil {
		size += e.replica.size()
	}
	if e.rep != nil {
		size += replicaEntrySize
	}
	if e.generated != nil {
		size += generatedSize
	}
	if e.tenant != nil {
		size += 24
	}
	e.size = clamp32(int64(size))
	return e
}

// sameInline reports whether e, being encoded from strs, keeps inline
// the same strings as prev, in the same fields.
func sameInline(prev, e *entry, strs *[numStrings]*string) bool {
	off := 0
	for i, p := range strs {
		if (prev.codes[i] == codeInline) != (e.codes[i] == codeInline) {
			return false
		}
		if e.codes[i] != codeInline {
			continue
		}
		l, k := uvarint(prev.text[off:])
		off += k
		if prev.text[off:off+int(l)] != *p {
			return false
		}
		off += int(l)
	}
	return true
}

// str is string field i of e (an interned value is not copied; an
// inline one is).
func (e *entry) str(i int, in *interner) string {
	switch c := e.codes[i]; c {
	case codeEmpty:
		return ""
	case codeInline:
		off := 0
		for j := range i {
			if e.codes[j] == codeInline {
				l, k := uvarint(e.text[off:])
				off += k + int(l)
			}
		}
		l, k := uvarint(e.text[off:])
		return e.text[off+k : off+k+int(l)]
	default:
		return in.value(c)
	}
}

// is reports whether string field i of e equals s, without copying.
func (e *entry) is(i int, s string, in *interner) bool {
	if c := e.codes[i]; c >= codeFirst {
		return in.value(c) == s
	}
	return e.str(i, in) == s
}

// decode is the Record e keeps; it shares nothing with e but what
// records share (the candidates are copied, as readers always got them).
func (e *entry) decode(in *interner) Record {
	r := Record{
		Seq: e.seq, Draw: e.draw, Slot: uint64(e.slot), TotalWeight: uint64(e.totalWeight), DecisionMicros: int64(e.decisionMicros),
		TokenCost: e.tokenCost, DemandBooked: e.demandBooked, ShedWaived: e.shedWaived, ShedWaivedFirstToken: e.shedWaivedAt, ShedWaivedScale: e.shedWaivedScale, TotalMillis: float64(e.totalMicros) / 1000,
		MaxTokens: int(e.maxTokens), PromptTokens: int(e.promptTokens), Status: int(e.status),
		Replica: e.replica, Generated: e.generated,
		Stream: e.flags&flagStream != 0, Mismatch: e.flags&flagMismatch != 0, Complete: e.flags&flagComplete != 0,
	}
	if e.start != 0 {
		r.Start = time.Unix(0, e.start)
	}
	if e.rep != nil {
		r.Replica = e.rep.decode(in)
	}
	if e.tenant != nil {
		r.TenantDemand, r.TenantFair, r.TenantShed = e.tenant[0], e.tenant[1], e.tenant[2]
	}
	if len(e.candidates) > 0 {
		r.Candidates = append([]Candidate(nil), e.candidates...)
	}
	off := 0
	for i, p := range r.strings() {
		switch c := e.codes[i]; c {
		case codeEmpty:
		case codeInline:
			l, k := uvarint(e.text[off:])
			*p = strings.Clone(e.text[off+k : off+k+int(l)])
			off += k + int(l)
		default:
			*p = in.value(c)
		}
	}
	return r
}

// uvarintLen is the bytes binary.AppendUvarint takes for n.
func uvarintLen(n int) int {
	k := 1
	for ; n >= 0x80; n >>= 7 {
		k++
	}
	return k
}

// uvarint reads a uvarint at the start of s: its value and length.
func uvarint(s string) (uint64, int) {
	var x uint64
	for i := 0; i < len(s) && i < binary.MaxVarintLen64; i++ {
		b := s[i]
		x |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			return x, i + 1
		}
	}
	return 0, len(s) // never: the log wrote s
}

func clamp32(v int64) int32 { return int32(min(max(v, math.MinInt32), math.MaxInt32)) }

func clamp32u(v uint64) uint32 { return uint32(min(v, math.MaxUint32)) }
