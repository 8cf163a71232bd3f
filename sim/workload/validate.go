package workload

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// FieldError is one problem of a [Spec] or [Replay]: the field path, such
// as "sources[1].mean_rate", and what is wrong with its value.
type FieldError struct {
	Path string
	Msg  string
}

func (e *FieldError) Error() string { return e.Path + ": " + e.Msg }

// problems collects the FieldErrors of one validation.
type problems []error

func (p *problems) addf(path, format string, args ...any) {
	*p = append(*p, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

// finite reports whether x is neither NaN nor infinite.
func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// Validate checks s and returns every problem at once, joined with
// errors.Join; each is a *[FieldError] naming the field path (snake_case,
// as in "sources[1].bursts[0].factor") and the bad value. It returns nil
// for a valid spec. Zero values that have a default are valid.
func (s Spec) Validate() error {
	var p problems
	if s.Duration <= 0 {
		p.addf("duration", "%v: want > 0", s.Duration)
	}
	if s.Period < 0 {
		p.addf("period", "%v: want > 0, or 0 for %v", s.Period, DefaultPeriod)
	}
	if len(s.Sources) == 0 {
		p.addf("sources", "no source: want at least one")
	}
	seen := map[[2]string]bool{}
	for i, src := range s.Sources {
		path := fmt.Sprintf("sources[%d]", i)
		switch {
		case src.Name == "":
			p.addf(path+".name", "empty")
		case seen[[2]string{src.Name, src.Tenant}]:
			p.addf(path+".name", "duplicate source %q (tenant %q)", src.Name, src.Tenant)
		}
		seen[[2]string{src.Name, src.Tenant}] = true
		src.validate(&p, path, s.Duration)
	}
	return errors.Join(p...)
}

func (src SourceSpec) validate(p *problems, path string, duration time.Duration) {
	if !(src.UTCOffsetHours >= -12 && src.UTCOffsetHours <= 14) {
		p.addf(path+".utc_offset_hours", "%g: want a time zone in [-12, 14]", src.UTCOffsetHours)
	}
	if !(src.MeanRate > 0) || !finite(src.MeanRate) {
		p.addf(path+".mean_rate", "%g: want requests per second > 0", src.MeanRate)
	}
	if !(src.DiurnalAmplitude >= 0 && src.DiurnalAmplitude <= 1) {
		p.addf(path+".diurnal_amplitude", "%g: want [0, 1]", src.DiurnalAmplitude)
	}
	if k := src.GammaShape; k != 0 && !(k >= 0.01 && k <= 100) {
		p.addf(path+".gamma_shape", "%g: want [0.01, 100], or 0 for %g", k, DefaultGammaShape)
	}
	for j, b := range src.Bursts {
		bp := fmt.Sprintf("%s.bursts[%d]", path, j)
		if b.At < 0 || (duration > 0 && b.At >= duration) {
			p.addf(bp+".at", "%v: want in [0, duration %v)", b.At, duration)
		}
		if b.Duration <= 0 {
			p.addf(bp+".duration", "%v: want > 0", b.Duration)
		}
		if !(b.Factor >= 0) || !finite(b.Factor) {
			p.addf(bp+".factor", "%g: want a finite rate multiplier >= 0", b.Factor)
		}
	}
	if len(src.Models) == 0 {
		p.addf(path+".models", "no model: want at least one")
	}
	checkShares(p, path+".models", src.Models, nil)
	checkShares(p, path+".priorities", src.Priorities, []string{PriorityCritical, PriorityStandard, PrioritySheddable})
	src.Lengths.validate(p, path+".lengths")
	if !(src.SessionShare >= 0 && src.SessionShare <= 1) {
		p.addf(path+".session_share", "%g: want [0, 1]", src.SessionShare)
	}
	switch turns := src.SessionTurns; {
	case !finite(turns) || turns < 0:
		p.addf(path+".session_turns", "%g: want a finite mean number of turns >= 1", turns)
	case src.SessionShare > 0 && turns < 1:
		p.addf(path+".session_turns", "%g: want a mean number of turns >= 1 (session_share is %g)", turns, src.SessionShare)
	}
	if src.SessionThink < 0 {
		p.addf(path+".session_think", "%v: want >= 0 (0 for %v)", src.SessionThink, DefaultSessionThink)
	}
	if src.SharedPrefixTokens < 0 || src.SharedPrefixTokens >= MaxTokens {
		p.addf(path+".shared_prefix_tokens", "%d: want tokens in [0, %d)", src.SharedPrefixTokens, MaxTokens)
	}
	src.validateDocuments(p, path)
	src.validateAdapters(p, path)
}

// validateDocuments checks the document fields; unused ones (Documents 0)
// must be in range too, and 0 is always in range.
func (src SourceSpec) validateDocuments(p *problems, path string) {
	n, per, tokens := src.Documents, src.DocumentsPerRequest, src.DocumentTokens
	if n < 0 || n > MaxDocuments {
		p.addf(path+".documents", "%d: want [0, %d] (0 for none)", n, MaxDocuments)
	}
	switch {
	case tokens < 0 || tokens >= MaxTokens:
		p.addf(path+".document_tokens", "%d: want tokens in [1, %d), or 0 without documents", tokens, MaxTokens)
	case n > 0 && tokens == 0:
		p.addf(path+".document_tokens", "0: want tokens >= 1 (documents is %d)", n)
	}
	switch {
	case per < 0:
		p.addf(path+".documents_per_request", "%d: want [1, documents], or 0 without documents", per)
	case n > 0 && (per < 1 || per > n):
		p.addf(path+".documents_per_request", "%d: want [1, documents (%d)]", per, n)
	}
	if s := src.DocumentZipf; !(s >= 0 && s <= MaxDocumentZipf) {
		p.addf(path+".document_zipf", "%g: want a Zipf exponent in [0, %g]", s, MaxDocumentZipf)
	}
	// In int64, which holds per × tokens on 32-bit platforms too.
	lead := int64(src.SharedPrefixTokens) + int64(per)*int64(tokens)
	fieldsOK := per >= 1 && per <= n && tokens >= 1 && src.SharedPrefixTokens >= 0 && src.SharedPrefixTokens < MaxTokens
	if fieldsOK && lead >= MaxTokens {
		p.addf(path+".document_tokens", "%d: %d documents of %d tokens after a %d-token system prompt make %d tokens, want < %d (room for a question)",
			tokens, per, tokens, src.SharedPrefixTokens, lead, MaxTokens)
	}
}

// checkShares checks names (unique, not empty, among allowed if not nil)
// and weights (finite, > 0).
func checkShares(p *problems, path string, shares []Share, allowed []string) {
	seen := map[string]bool{}
	for i, s := range shares {
		sp := fmt.Sprintf("%s[%d]", path, i)
		switch {
		case s.Name == "":
			p.addf(sp+".name", "empty")
		case allowed != nil && !slices.Contains(allowed, s.Name):
			p.addf(sp+".name", "%q: want one of %q", s.Name, allowed)
		case seen[s.Name]:
			p.addf(sp+".name", "duplicate %q", s.Name)
		}
		seen[s.Name] = true
		if !(s.Weight > 0) || !finite(s.Weight) {
			p.addf(sp+".weight", "%g: want a finite weight > 0", s.Weight)
		}
	}
}

func (l Lengths) validate(p *problems, path string) {
	if len(l.Rows) > 0 {
		if l.InputMean != 0 || l.InputP99 != 0 || l.OutputMean != 0 || l.OutputP99 != 0 {
			p.addf(path, "both rows (%d) and lognormal parameters: want one or the other", len(l.Rows))
		}
		for i, r := range l.Rows {
			if r.Input < 0 || r.Output < 0 {
				p.addf(fmt.Sprintf("%s.rows[%d]", path, i), "input %d, output %d: want token counts >= 0", r.Input, r.Output)
				break
			}
		}
		return
	}
	checkLognormal(p, path, "input", l.InputMean, l.InputP99)
	checkLognormal(p, path, "output", l.OutputMean, l.OutputP99)
}

// checkLognormal checks the mean and p99 of path.name (input or output).
func checkLognormal(p *problems, path, name string, mean, p99 float64) {
	switch {
	case !(mean >= 1) || !finite(mean):
		p.addf(path+"."+name+"_mean", "%g: want a mean length >= 1 token (or rows)", mean)
	case !(p99 >= mean) || !finite(p99):
		p.addf(path+"."+name+"_p99", "%g: want >= %s_mean (%g)", p99, name, mean)
	case p99 > MaxLognormalRatio*mean:
		p.addf(path+"."+name+"_p99", "%g: want <= %g × %s_mean (%g) for a lognormal", p99, MaxLognormalRatio, name, mean)
	}
}

// validateAdapters checks the adapter fields.
func (src SourceSpec) validateAdapters(p *problems, path string) {
	a := src.Adapters
	if !(a.Share >= 0 && a.Share <= 1) {
		p.addf(path+".adapters.share", "%g: want a fraction in [0, 1]", a.Share)
	}
	if a.Count < 0 || a.Count > MaxAdapters {
		p.addf(path+".adapters.count", "%d: want [0, %d]", a.Count, MaxAdapters)
	}
	if s := a.Zipf; !(s >= 0 && s <= MaxDocumentZipf) {
		p.addf(path+".adapters.zipf", "%g: want a Zipf exponent in [0, %g]", s, MaxDocumentZipf)
	}
}
