package workload

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// DefaultHashBlockTokens is the number of tokens one trace hash ID covers
// by default: 512, as in the Mooncake traces.
const DefaultHashBlockTokens = 512

// Replay plays a trace as the requests of one source.
//
// Rate scaling compresses time: the row at trace time x arrives at
// x / RateScale, so RateScale 3 gives three times the requests per second
// with the same burst shape, three times faster (the CV of counts per
// 1/3 s is that of the trace per 1 s). No row is dropped or duplicated
// within one pass over the trace.
//
// The scaled trace loops with period L = (span + span/(n-1)) / RateScale,
// where span is the time from the first to the last of the n rows: one
// mean gap separates a pass's last row from the next pass's first. Shift
// rotates the loop: the row at scaled time x arrives at
// (x + Shift) mod L + k·L for k = 0, 1, ..., so that any shift (negative
// too) fills the workload from time 0; shifting each region's replay of
// one trace by its time zone staggers their peaks.
type Replay struct {
	// Rows is the trace, sorted by At as the readers return it; at least
	// two rows at different times.
	Rows []Row
	// Source and Model are copied into every request; not empty.
	Source, Model string
	// Priorities are drawn per request; empty means all "standard".
	Priorities []Share
	// RateScale multiplies the request rate by compressing time, > 0;
	// 0 means 1.
	RateScale float64
	// Shift rotates the scaled trace, in workload time (after scaling):
	// see [Replay].
	Shift time.Duration
	// HashBlockTokens is the number of prompt tokens per entry of
	// Row.HashIDs, a positive multiple of [BlockTokens]; 0 means
	// [DefaultHashBlockTokens]. Each ID expands into HashBlockTokens /
	// BlockTokens prefix hashes, salted with Source, for the full blocks
	// of the prompt; the hashes repeat when the trace loops.
	HashBlockTokens int
	// Seed seeds the priority draws.
	Seed uint64
}

// Requests returns the replayed requests arriving in [0, duration), sorted
// by At, looping the trace as often as needed. Prompt and Output are the
// row's lengths, raised to at least 1. A bad field of r gives errors (one
// *[FieldError] per problem, paths like "replay.rate_scale").
func (r Replay) Requests(duration time.Duration) ([]Request, error) {
	if err := r.validate(duration); err != nil {
		return nil, err
	}
	scale := r.scale()
	per := r.HashBlockTokens
	if per == 0 {
		per = DefaultHashBlockTokens
	}
	per /= BlockTokens
	n := len(r.Rows)
	origin := r.Rows[0].At
	span := float64(r.Rows[n-1].At - origin)
	loop := time.Duration(math.Round((span + span/float64(n-1)) / scale))
	shift := r.Shift % loop
	if shift < 0 {
		shift += loop
	}
	// One pass: the rows' arrival times within [0, loop), in arrival order.
	type slot struct {
		at  time.Duration
		row int
	}
	pass := make([]slot, n)
	for i, row := range r.Rows {
		x := time.Duration(math.Round(float64(row.At-origin) / scale))
		pass[i] = slot{at: (x + shift) % loop, row: i}
	}
	slices.SortStableFunc(pass, func(a, b slot) int { return cmp.Compare(a.at, b.at) })

	salt := mix(tagTrace, hashString(r.Source))
	prefixes := make([][]uint64, n) // per row, computed once and shared by passes
	prios := newPicker(r.Priorities, PriorityStandard)
	rng := newRand(r.Seed, 0, streamAttributes)
	reqs := make([]Request, 0, int(float64(n)*float64(duration)/float64(loop))+1)
	for base := time.Duration(0); base < duration; base += loop {
		for _, s := range pass {
			at := base + s.at
			if at >= duration {
				break
			}
			row := r.Rows[s.row]
			if prefixes[s.row] == nil && len(row.HashIDs) > 0 {
				prefixes[s.row] = traceBlocks(salt, row.HashIDs, per, row.Input)
			}
			reqs = append(reqs, Request{
				At:       at,
				Source:   r.Source,
				Model:    r.Model,
				Priority: prios.names[prios.pick(rng)],
				Prompt:   max(row.Input, 1),
				Output:   max(row.Output, 1),
				Prefix:   prefixes[s.row],
			})
		}
	}
	return reqs, nil
}

func (r Replay) validate(duration time.Duration) error {
	var p problems
	if duration < 0 {
		p.addf("duration", "%v: want >= 0", duration)
	}
	switch n := len(r.Rows); {
	case n < 2:
		p.addf("replay.rows", "%d rows: want at least 2 to loop", n)
	case !slices.IsSortedFunc(r.Rows, rowByAt):
		p.addf("replay.rows", "not sorted by at")
	case r.Rows[n-1].At == r.Rows[0].At:
		p.addf("replay.rows", "all %d rows at %v: want a span > 0 to loop", n, r.Rows[0].At)
	}
	if r.Source == "" {
		p.addf("replay.source", "empty")
	}
	if r.Model == "" {
		p.addf("replay.model", "empty")
	}
	checkShares(&p, "replay.priorities", r.Priorities, []string{PriorityCritical, PriorityStandard, PrioritySheddable})
	if !(r.RateScale >= 0) || !finite(r.RateScale) {
		p.addf("replay.rate_scale", "%g: want > 0, or 0 for 1", r.RateScale)
	}
	if h := r.HashBlockTokens; h < 0 || h%BlockTokens != 0 {
		p.addf("replay.hash_block_tokens", "%d: want a positive multiple of %d, or 0 for %d", h, BlockTokens, DefaultHashBlockTokens)
	}
	if err := errors.Join(p...); err != nil {
		return err
	}
	// The loop must be at least 1ns per row after scaling.
	if span := float64(r.Rows[len(r.Rows)-1].At - r.Rows[0].At); span/r.scale() < float64(len(r.Rows)) {
		return &FieldError{Path: "replay.rate_scale", Msg: fmt.Sprintf("%g: compresses the trace below 1ns per row", r.RateScale)}
	}
	return nil
}

func (r Replay) scale() float64 {
	if r.RateScale == 0 {
		return 1
	}
	return r.RateScale
}
