package signals

import (
	"math"

	dto "github.com/prometheus/client_model/go"
)

// ttftSignal is a time-to-first-token histogram: the family names to try,
// in order of preference, and the target that splits its requests into
// fast and slow (seconds; 0: not read).
type ttftSignal struct {
	families []string
	target   float64
}

// ttftFamilies adds the sample names of histogram families to want, for
// the pre-parse line filter.
func ttftFamilies(names []string, want map[string]struct{}) {
	for _, n := range names {
		for _, s := range []string{"", "_bucket", "_sum", "_count"} {
			want[n+s] = struct{}{}
		}
	}
}

// readTTFT sums the first present histogram family of sig over its series:
// count is how many requests it observed, within how many of them took at
// most the target (histogramWithin: interpolated within the bucket that
// straddles it). ok is false, with a problem, when the family is not a
// histogram, has no bucket at or below the target, or holds a bad value
// (negative, NaN, infinite, a bucket above the count).
func (r *reader) readTTFT(sig ttftSignal) (count, within, sum float64, ok bool) {
	if sig.target <= 0 || len(sig.families) == 0 {
		return 0, 0, 0, false
	}
	for _, name := range sig.families {
		f := r.fams[name]
		if f == nil {
			continue
		}
		if f.GetType() != dto.MetricType_HISTOGRAM {
			r.problemf("%s is not a histogram: TTFT unknown", name)
			return 0, 0, 0, false
		}
		for _, m := range f.GetMetric() {
			c, w, good := histogramWithin(m.GetHistogram(), sig.target)
			if !good {
				r.problemf("%s has no usable bucket at or below %ss: TTFT unknown", name, fmtFloat(sig.target))
				return 0, 0, 0, false
			}
			count += c
			within += w
			sum += m.GetHistogram().GetSampleSum()
		}
		if math.IsInf(count, 0) || !(sum >= 0) || math.IsInf(sum, 0) {
			r.problemf("%s overflows or has a bad sum: TTFT unknown", name)
			return 0, 0, 0, false
		}
		return count, within, sum, true
	}
	return 0, 0, 0, false
}

// histogramWithin is one series' count and how many of its observations
// were at most target: the cumulative count at the largest bucket bound ≤
// target, plus the straddling bucket's count interpolated linearly up to
// the target (observations taken as spread evenly within a bucket, as
// Prometheus' histogram_quantile does: the verdict "p99 over the target"
// then agrees with the operator's dashboards). vLLM's buckets step from
// 1 s to 2.5 s: counting the whole straddling bucket as slow judged a 2 s
// target as 1 s. Without a finite bound above the target, the count at
// the bound below.
func histogramWithin(h *dto.Histogram, target float64) (count, within float64, ok bool) {
	count = float64(h.GetSampleCount())
	if v := h.GetSampleCountFloat(); v > 0 {
		count = v
	}
	cum := func(b *dto.Bucket) float64 {
		if v := b.GetCumulativeCountFloat(); v > 0 {
			return v
		}
		return float64(b.GetCumulativeCount())
	}
	var lo, hi *dto.Bucket // the largest bound ≤ target, the smallest finite one above
	for _, b := range h.GetBucket() {
		switch ub := b.GetUpperBound(); {
		case math.IsNaN(ub) || math.IsInf(ub, 0):
		case ub <= target:
			if lo == nil || ub > lo.GetUpperBound() {
				lo = b
			}
		case hi == nil || ub < hi.GetUpperBound():
			hi = b
		}
	}
	if lo == nil || !(count >= 0) || math.IsInf(count, 0) {
		return 0, 0, false
	}
	within = cum(lo)
	if hi != nil {
		above := cum(hi)
		if !(above >= within) || above > count {
			return 0, 0, false
		}
		l, u := lo.GetUpperBound(), hi.GetUpperBound()
		within += (above - within) * (target - l) / (u - l)
	}
	if !(within >= 0) || within > count {
		return 0, 0, false
	}
	return count, within, true
}
