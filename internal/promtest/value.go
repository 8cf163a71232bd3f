package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Value returns the value of the counter or gauge name whose labels
// include labels, gathered from reg; ok is false when there is none.
func Value(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			case m.GetUntyped() != nil:
				return m.GetUntyped().GetValue(), true
			}
		}
	}
	return 0, false
}

// Check fails the test unless the counter or gauge name with labels has
// the value want.
func Check(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string, want float64) {
	t.Helper()
	got, ok := Value(t, reg, name, labels)
	if !ok || got != want {
		t.Errorf("%s%v = %v (present %v); want %v", name, labels, got, ok, want)
	}
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}
