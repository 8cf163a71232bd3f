package weights

import (
	"math"
	"slices"
)

// Quantize turns shares (>= 0, not all zero) into integer weights summing
// to total by the largest-remainder method: each share gets the floor of
// its exact quota, and the units left go to the largest remainders, ties
// to the earlier index. The result depends only on the inputs, so the same
// shares always give the same weights (and the same version). Non-finite
// or negative shares count as zero. It returns all zeros when no share is
// positive.
func Quantize(shares []float64, total uint32) []uint32 {
	out := make([]uint32, len(shares))
	var sum float64
	for _, s := range shares {
		if ok(s) {
			sum += s
		}
	}
	if sum <= 0 || math.IsInf(sum, 0) {
		return out
	}
	type rem struct {
		i int
		r float64
	}
	rems := make([]rem, 0, len(shares))
	var given uint64
	for i, s := range shares {
		if !ok(s) {
			continue
		}
		q := s / sum * float64(total)
		f := math.Floor(q)
		out[i] = uint32(f)
		given += uint64(out[i])
		rems = append(rems, rem{i, q - f})
	}
	slices.SortStableFunc(rems, func(a, b rem) int {
		switch {
		case a.r > b.r:
			return -1
		case a.r < b.r:
			return 1
		}
		return a.i - b.i
	})
	for k := 0; given < uint64(total) && len(rems) > 0; k = (k + 1) % len(rems) {
		out[rems[k].i]++
		given++
	}
	return out
}

func ok(s float64) bool { return s > 0 && !math.IsInf(s, 0) && !math.IsNaN(s) }
