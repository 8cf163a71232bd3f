package signals

import (
	"errors"
	"fmt"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// selector picks the series of one metric: a family (or, for a name ending
// in _sum or _count, the sample sum or count of a histogram or summary
// family) and, optionally, required label values. Written like PromQL:
// name or name{label="value",...} (quotes optional).
type selector struct {
	name   string
	labels []labelMatch
}

type labelMatch struct{ name, value string }

// String formats the selector as it is written in problems.
func (s selector) String() string {
	if len(s.labels) == 0 {
		return s.name
	}
	var b strings.Builder
	b.WriteString(s.name)
	b.WriteByte('{')
	for i, l := range s.labels {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", l.name, l.value)
	}
	b.WriteByte('}')
	return b.String()
}

// parseSelector reads name or name{l="v",...}.
func parseSelector(s string) (selector, error) {
	s = strings.TrimSpace(s)
	name, rest, hasLabels := strings.Cut(s, "{")
	name = strings.TrimSpace(name)
	if !validMetricName(name) {
		return selector{}, fmt.Errorf("%q: %q is not a metric name", s, name)
	}
	sel := selector{name: name}
	if !hasLabels {
		return sel, nil
	}
	body, ok := strings.CutSuffix(strings.TrimSpace(rest), "}")
	if !ok {
		return selector{}, fmt.Errorf("%q: want name{label=\"value\",...}", s)
	}
	for part := range strings.SplitSeq(body, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		k, v, ok := strings.Cut(part, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if uq, err := unquote(v); err == nil {
			v = uq
		}
		if !ok || !validLabelName(k) {
			return selector{}, fmt.Errorf("%q: %q is not label=\"value\"", s, part)
		}
		sel.labels = append(sel.labels, labelMatch{k, v})
	}
	return sel, nil
}

// unquote strips the double quotes of a label value.
func unquote(v string) (string, error) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
		return v[1 : len(v)-1], nil
	}
	return "", errors.New("not quoted")
}

func validMetricName(s string) bool {
	for i := range len(s) {
		if !nameChar(s[i], i == 0) {
			return false
		}
	}
	return s != ""
}

// nameChar reports whether c may appear in a legacy metric name (digits
// not first).
func nameChar(c byte, first bool) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
}

func validLabelName(s string) bool {
	return validMetricName(s) && !strings.Contains(s, ":")
}

// matches reports whether m carries every required label value.
func (s selector) matches(m *dto.Metric) bool {
	for _, want := range s.labels {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == want.name {
				found = l.GetValue() == want.value
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// familyNames adds to set the family and sample names the selector may be
// found under, for the pre-parse line filter: the name itself; for name_sum
// or name_count, the histogram or summary family name and its other
// samples; for name_total, the OpenMetrics counter family name.
func (s selector) familyNames(set map[string]struct{}) {
	set[s.name] = struct{}{}
	for _, suffix := range []string{"_sum", "_count"} {
		if base, ok := strings.CutSuffix(s.name, suffix); ok {
			for _, n := range []string{base, base + "_sum", base + "_count", base + "_bucket"} {
				set[n] = struct{}{}
			}
		}
	}
	if base, ok := strings.CutSuffix(s.name, "_total"); ok {
		set[base] = struct{}{}
	} else {
		set[s.name+"_total"] = struct{}{}
	}
}

// sample is one series' value and its model label.
type sample struct {
	value float64
	model string
}

// find returns the samples the selector picks in fams, and whether its
// family exists with at least one matching series. The family is looked up
// as named; then, for name_sum/name_count, as a histogram or summary; then,
// for a counter named without its suffix, as name_total.
func (s selector) find(fams map[string]*dto.MetricFamily, modelLabel string, buf []sample) ([]sample, bool) {
	buf = buf[:0]
	get := func(f *dto.MetricFamily, val func(*dto.Metric) (float64, bool)) ([]sample, bool) {
		for _, m := range f.GetMetric() {
			if !s.matches(m) {
				continue
			}
			if v, ok := val(m); ok {
				buf = append(buf, sample{value: v, model: labelValue(m, modelLabel)})
			}
		}
		return buf, len(buf) > 0
	}
	if f, ok := fams[s.name]; ok {
		switch f.GetType() {
		case dto.MetricType_GAUGE, dto.MetricType_COUNTER, dto.MetricType_UNTYPED:
			return get(f, scalar)
		}
	}
	for _, suffix := range []string{"_sum", "_count"} {
		base, ok := strings.CutSuffix(s.name, suffix)
		if !ok {
			continue
		}
		if f, ok := fams[base]; ok && (f.GetType() == dto.MetricType_HISTOGRAM || f.GetType() == dto.MetricType_SUMMARY) {
			return get(f, func(m *dto.Metric) (float64, bool) { return aggregate(m, suffix == "_sum") })
		}
	}
	if f, ok := fams[s.name+"_total"]; ok && f.GetType() == dto.MetricType_COUNTER {
		return get(f, scalar)
	}
	return buf, false
}

func scalar(m *dto.Metric) (float64, bool) {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue(), true
	case m.Counter != nil:
		return m.Counter.GetValue(), true
	case m.Untyped != nil:
		return m.Untyped.GetValue(), true
	}
	return 0, false
}

// aggregate is a histogram's or summary's sample sum (sum) or count.
func aggregate(m *dto.Metric, sum bool) (float64, bool) {
	switch {
	case m.Histogram != nil && sum:
		return m.Histogram.GetSampleSum(), true
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount()), true
	case m.Summary != nil && sum:
		return m.Summary.GetSampleSum(), true
	case m.Summary != nil:
		return float64(m.Summary.GetSampleCount()), true
	}
	return 0, false
}

func labelValue(m *dto.Metric, name string) string {
	if name == "" {
		return ""
	}
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
