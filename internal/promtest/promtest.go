// Package promtest holds test helpers for Prometheus metrics: the text
// exposition of a registry, compared with a golden file.
package promtest

import (
	"bytes"
	"os"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Exposition is reg's text exposition (format 0.0.4), families sorted by
// name as Gather returns them.
func Exposition(t testing.TB, reg prometheus.Gatherer) []byte {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// Golden compares got with the file at path, first rewriting the file
// with got when update is set (the packages' -update flag).
func Golden(t testing.TB, got []byte, path string, update bool) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("exposition differs from %s (rerun the test with -update to accept it):\n%s", path, got)
	}
}

// Without is reg without the families skip names: for a golden file of a
// registry whose histograms of wall-clock durations are not reproducible.
func Without(reg prometheus.Gatherer, skip ...string) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := reg.Gather()
		out := mfs[:0]
		for _, mf := range mfs {
			if !slices.Contains(skip, mf.GetName()) {
				out = append(out, mf)
			}
		}
		return out, err
	})
}
