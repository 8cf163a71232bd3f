package signals

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"

	"github.com/ilbproject/ilb/internal/bound"
)

// mapping turns parsed metric families into [Metrics] for one engine kind.
// It is immutable after compile and shared by the replicas of a cluster.
type mapping struct {
	waiting, running, kv, prompt, generation signal
	ttft                                     ttftSignal
	lora                                     string // family of LoRA, "" none
	modelLabel                               string
	// want holds every family and sample name the mapping may read: the
	// pre-parse line filter keeps only those.
	want map[string]struct{}
}

// signal is one value with its sources in order of preference; a signal
// without sources is not configured (e.g. TGI's KV usage).
type signal struct {
	sources []source
}

// source is a selector, or the ratio of two selectors' sums.
type source struct {
	num selector
	den *selector
}

func (s source) String() string {
	if s.den == nil {
		return s.num.String()
	}
	return s.num.String() + " / " + s.den.String()
}

// String names the signal in problems: its sources joined by " or ".
func (s signal) String() string {
	names := make([]string, len(s.sources))
	for i, src := range s.sources {
		names[i] = src.String()
	}
	return strings.Join(names, " or ")
}

func (sp mappingSpec) compile() (*mapping, error) {
	m := &mapping{modelLabel: sp.modelLabel, want: map[string]struct{}{}, ttft: ttftSignal{families: sp.ttft}, lora: sp.lora}
	ttftFamilies(sp.ttft, m.want)
	if sp.lora != "" {
		m.want[sp.lora] = struct{}{}
	}
	for _, f := range []struct {
		dst      *signal
		exprs    []string
		required bool
		what     string
	}{
		{&m.waiting, sp.waiting, true, "waiting"},
		{&m.running, sp.running, true, "running"},
		{&m.kv, sp.kv, false, "kv_usage"},
		{&m.prompt, sp.prompt, false, "prompt_tokens"},
		{&m.generation, sp.generation, false, "generation_tokens"},
	} {
		if f.required && len(f.exprs) == 0 {
			return nil, fmt.Errorf("%s: a metric name is required", f.what)
		}
		for _, e := range f.exprs {
			src, err := parseSource(e)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f.what, err)
			}
			src.num.familyNames(m.want)
			if src.den != nil {
				src.den.familyNames(m.want)
			}
			f.dst.sources = append(f.dst.sources, src)
		}
	}
	return m, nil
}

// parseSource reads "selector" or "selector / selector".
func parseSource(e string) (source, error) {
	numS, denS, ratio := strings.Cut(e, " / ")
	num, err := parseSelector(numS)
	if err != nil {
		return source{}, err
	}
	src := source{num: num}
	if ratio {
		den, err := parseSelector(denS)
		if err != nil {
			return source{}, err
		}
		src.den = &den
	}
	return src, nil
}

// extraction is the result of reading one scrape.
type extraction struct {
	metrics Metrics
	// good: Waiting and Running are known, so the load is known.
	good bool
	// tokens is PromptTokens+GenerationTokens; tokensKnown when every
	// configured token counter is known and at least one is configured.
	tokens      float64
	tokensKnown bool
	// firstTokens and fastFirstTokens are the TTFT histogram's counters
	// (all requests, those within the target); ttftKnown when read.
	firstTokens, fastFirstTokens, ttftSum float64
	ttftKnown                             bool
}

// extract reads the mapping's signals from fams. Unusable values are
// unknown with a problem each; TokensPerSecond is left to the caller.
func (m *mapping) extract(fams map[string]*dto.MetricFamily) extraction {
	r := reader{m: m, fams: fams}
	var x extraction
	var wOK, rOK, kvOK bool
	x.metrics.Waiting, wOK = r.read(m.waiting, false)
	x.metrics.Running, rOK = r.read(m.running, false)
	x.metrics.KVUsage, kvOK = r.read(m.kv, true)
	x.metrics.KVKnown = kvOK
	if !kvOK {
		x.metrics.KVUsage = 0
	}
	x.good = wOK && rOK
	if !x.good {
		x.metrics.Waiting, x.metrics.Running = 0, 0
	}
	x.tokensKnown = len(m.prompt.sources)+len(m.generation.sources) > 0
	for _, t := range []struct {
		sig signal
		dst *float64
	}{{m.prompt, &x.metrics.PromptTokens}, {m.generation, &x.metrics.GenerationTokens}} {
		if len(t.sig.sources) == 0 {
			continue
		}
		v, ok := r.read(t.sig, false)
		if ok && !math.IsInf(x.tokens+v, 0) {
			*t.dst = v
			x.tokens += v
		} else {
			x.tokensKnown = false
		}
	}
	x.firstTokens, x.fastFirstTokens, x.ttftSum, x.ttftKnown = r.readTTFT(m.ttft)
	x.metrics.LoRA = r.readLoRA(m.lora)
	slices.Sort(r.models)
	x.metrics.Models = slices.Compact(r.models)
	x.metrics.Problems = r.problems
	return x
}

// reader accumulates models and problems over one extraction.
type reader struct {
	m        *mapping
	fams     map[string]*dto.MetricFamily
	buf      []sample
	models   []string
	problems []string
}

// read returns the signal's value from its first present source: the sum
// of its series, or their maximum for a fraction (maxOf), which must then
// be in [0, 1]. ok is false, with a problem, when no source is present or
// a value is NaN, infinite or negative; a signal without sources is
// silently unknown.
func (r *reader) read(sig signal, fraction bool) (float64, bool) {
	if len(sig.sources) == 0 {
		return 0, false
	}
	for _, src := range sig.sources {
		num, okN := r.sum(src.num, fraction && src.den == nil)
		if !okN.present {
			continue
		}
		v, ok := num, okN.valid
		if src.den != nil {
			den, okD := r.sum(*src.den, false)
			if !okD.present {
				continue
			}
			ok = ok && okD.valid
			if ok && den == 0 {
				r.problemf("%s: denominator is 0: unknown", src)
				return 0, false
			}
			v = num / den
		}
		if !ok {
			return 0, false
		}
		if fraction && v > 1 {
			r.problemf("%s is %s, above 1: unknown", src, fmtFloat(v))
			return 0, false
		}
		return v, true
	}
	r.problemf("%s missing", sig)
	return 0, false
}

type presence struct{ present, valid bool }

// maxModels bounds the models one replica's metrics may name.
const maxModels = 64

// sum adds (or, with maxOf, takes the largest of) the selector's series,
// noting models and bad values.
func (r *reader) sum(sel selector, maxOf bool) (float64, presence) {
	var found bool
	r.buf, found = sel.find(r.fams, r.m.modelLabel, r.buf)
	if !found {
		return 0, presence{}
	}
	var total float64
	valid := true
	for i, s := range r.buf {
		switch {
		case math.IsNaN(s.value):
			r.problemf("%s is NaN: unknown", sel)
			valid = false
		case math.IsInf(s.value, 0):
			r.problemf("%s is %s: unknown", sel, fmtFloat(s.value))
			valid = false
		case s.value < 0:
			r.problemf("%s is negative (%s): unknown", sel, fmtFloat(s.value))
			valid = false
		case maxOf && (i == 0 || s.value > total):
			total = s.value
		case !maxOf:
			total += s.value
		}
		// The model label comes from the engine: bounded in length, and
		// in number (a replica serves a few models, not thousands).
		if model := bound.String(s.model, bound.Name); model != "" && len(r.models) < maxModels && !slices.Contains(r.models, model) {
			r.models = append(r.models, model)
		}
		if !valid {
			break
		}
	}
	if valid && math.IsInf(total, 0) {
		r.problemf("%s sums to %s: unknown", sel, fmtFloat(total))
		valid = false
	}
	return total, presence{present: true, valid: valid}
}

func (r *reader) problemf(format string, args ...any) {
	r.problems = append(r.problems, fmt.Sprintf(format, args...))
}

func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
