package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/signals"
)

func TestPrintSignalsBlind(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		blind *signals.Blind
		want  []string
		not   []string
	}{
		{"seeing", nil, []string{"engine signals at 2026-12-01T11:59:59Z"}, []string{"BLIND"}},
		{"blind", &signals.Blind{Reason: "the signals loop woke 2.3s late (interval 1s)", Since: now.Add(-90 * time.Second)}, []string{
			"BLIND since 2026-12-01T11:58:30Z (1m30s): the signals loop woke 2.3s late (interval 1s)",
			"replicas failing silently keep their last known state; the controller keeps its last weights",
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			printSignals(&b, signalsView{Signals: &signals.Snapshot{At: now.Add(-time.Second), Blind: tt.blind}}, "", now)
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, b.String())
				}
			}
			for _, w := range tt.not {
				if strings.Contains(b.String(), w) {
					t.Errorf("output has %q:\n%s", w, b.String())
				}
			}
		})
	}
}
