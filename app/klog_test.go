package app

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

// TestQuietReflector: a reflector's list and watch failures are dropped
// (the signals monitor reports them once), other client-go lines pass,
// through derived handlers too.
func TestQuietReflector(t *testing.T) {
	tests := []struct {
		msg  string
		kept bool
	}{
		{"Failed to watch", false},
		{"Failed to list *v1.Pod", false},
		{"Observed a panic", true},
		{"Warning: v1 Endpoints is deprecated", true},
	}
	for _, tt := range tests {
		t.Run(tt.msg, func(t *testing.T) {
			var b bytes.Buffer
			log := slog.New(&quietReflector{slog.NewTextHandler(&b, nil)}).With("component", "client-go").WithGroup("g")
			log.ErrorContext(context.Background(), tt.msg, "err", "x")
			if got := strings.Contains(b.String(), tt.msg); got != tt.kept {
				t.Errorf("%q kept %v, want %v: %s", tt.msg, got, tt.kept, b.String())
			}
		})
	}
}
