package live_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/live"
	"github.com/ilbproject/ilb/signals"
)

// TestLiveWhileBlind: the fast loop follows what the signals monitor
// holds while blind (replicas failing silently keep their state: no
// exclusion), and still excludes a cluster for what the monitor saw.
func TestLiveWhileBlind(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	blind := &signals.Blind{Reason: "silent health probe failures (timeouts, no answer) at once: 2 of 2 of a, 2 of 2 of b", Since: since}
	tests := []struct {
		name     string
		clusters map[string]signals.Cluster
		blind    *signals.Blind
		excluded map[string]string // cluster → substring of Excluded; absent: not excluded
	}{
		{
			name:     "blind: held replicas serve",
			clusters: map[string]signals.Cluster{"a": {Ready: 2}, "b": {Ready: 1, Stale: 1}},
			blind:    blind,
		},
		{
			name:     "blind: refused everywhere in a cluster",
			clusters: map[string]signals.Cluster{"a": {Ready: 2}, "b": {Unhealthy: 2}},
			blind:    blind,
			excluded: map[string]string{"b": "no serving replica: 2 unhealthy (signals blind since 2026-01-02T03:04:05Z)"},
		},
		{
			name:     "not blind",
			clusters: map[string]signals.Cluster{"a": {Unhealthy: 1, Draining: 1}},
			excluded: map[string]string{"a": "no serving replica: 1 unhealthy, 1 draining"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := live.FromSignals(&signals.Snapshot{At: since, Clusters: tt.clusters, Blind: tt.blind}, config.Default().Controller.Capacity, nil)
			for name := range tt.clusters {
				got, want := l.Clusters[name].Excluded, tt.excluded[name]
				if (want == "") != (got == "") || !strings.Contains(got, want) {
					t.Errorf("%s: excluded %q, want %q", name, got, want)
				}
				if tt.blind == nil && strings.Contains(got, "blind") {
					t.Errorf("%s: %q mentions blindness", name, got)
				}
			}
		})
	}
}
