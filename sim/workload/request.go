package workload

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"time"
)

// Priorities of a request, as sent in the x-ilb-priority header.
const (
	PriorityCritical  = "critical"
	PriorityStandard  = "standard"
	PrioritySheddable = "sheddable"
)

// BlockTokens is the number of tokens per prefix block: [Request.Prefix]
// holds one hash per full block of this size.
const BlockTokens = 16

// MaxTokens is the largest prompt or output length a synthetic request gets
// (a 32k context window).
const MaxTokens = 32768

// Request is one request of a workload.
type Request struct {
	// At is the arrival time since the start of the workload, >= 0.
	At time.Duration
	// Source is the Envoy fleet the request enters (a region's gateway).
	Source string
	// Model is the model requested (the base model of an adapter).
	Model string
	// Adapter is the LoRA adapter of Model the request names ("" the
	// base model): what its "model" field says.
	Adapter string
	// Priority is "critical", "standard" or "sheddable".
	Priority string
	// Prompt is the prompt length in tokens, >= 1.
	Prompt int
	// Output is the number of tokens generated, >= 1.
	Output int
	// Session is "" or a session key shared by the turns of one
	// conversation; keys are unique within one workload.
	Session string
	// Tenant is the tenant the request belongs to ("" none): what
	// Envoy would set in x-ilb-tenant from the client's identity.
	Tenant string
	// Prefix optionally holds the hashes of the prompt's full
	// [BlockTokens]-token blocks that are shared with other requests, in
	// prompt order: the same prefix gives the same hashes. Its length is at
	// most Prompt / BlockTokens. Slices may share backing arrays between
	// requests: treat them as read-only.
	Prefix []uint64
}

// Share is a named weight: a model or a priority and its relative share of
// requests.
type Share struct {
	Name string
	// Weight is relative to the other shares of the list, > 0.
	Weight float64
}

// picker draws a name with probability proportional to its weight.
type picker struct {
	names []string
	cum   []float64 // cumulative weights; the last is the total
}

// newPicker returns a picker over shares, or one that always draws def when
// shares is empty. Shares must be valid (positive, finite weights).
func newPicker(shares []Share, def string) picker {
	if len(shares) == 0 {
		return picker{names: []string{def}, cum: []float64{1}}
	}
	p := picker{names: make([]string, len(shares)), cum: make([]float64, len(shares))}
	total := 0.0
	for i, s := range shares {
		total += s.Weight
		p.names[i], p.cum[i] = s.Name, total
	}
	return p
}

// pick returns the index of a drawn name. It always uses one draw of r, so
// the stream stays aligned whatever the number of names.
func (p picker) pick(r *rand.Rand) int {
	x := r.Float64() * p.cum[len(p.cum)-1]
	i, _ := slices.BinarySearch(p.cum, x)
	if x == p.cum[min(i, len(p.cum)-1)] {
		i++ // x equal to a boundary belongs to the next name
	}
	return min(i, len(p.names)-1)
}

// Merge returns the requests of all streams in one new slice sorted by At.
// Ties keep the order of the streams, then the order within a stream. The
// streams are not modified; a stream that is not sorted is sorted (stably)
// in a copy first.
func Merge(streams ...[]Request) []Request {
	parts := make([][]Request, 0, len(streams))
	for _, s := range streams {
		if len(s) == 0 {
			continue
		}
		if !isSorted(s) {
			s = slices.Clone(s)
			slices.SortStableFunc(s, byAt)
		}
		parts = append(parts, s)
	}
	switch len(parts) {
	case 0:
		return nil
	case 1:
		return slices.Clone(parts[0])
	}
	return mergeSorted(parts)
}

// mergeSorted merges sorted parts (at least two) into a new slice; ties
// keep the order of the parts. It scans the heads of all parts for each
// request, O(n·k), which beats a heap for the few sources of a workload.
func mergeSorted(parts [][]Request) []Request {
	total := 0
	for _, p := range parts {
		total += len(p)
	}
	out := make([]Request, 0, total)
	heads := make([]int, len(parts))
	for len(out) < total {
		best := -1
		for i, p := range parts {
			if heads[i] < len(p) && (best < 0 || p[heads[i]].At < parts[best][heads[best]].At) {
				best = i
			}
		}
		out = append(out, parts[best][heads[best]])
		heads[best]++
	}
	return out
}

func byAt(a, b Request) int { return cmp.Compare(a.At, b.At) }

func isSorted(s []Request) bool { return slices.IsSortedFunc(s, byAt) }
