package bound_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ilbproject/ilb/internal/bound"
)

func TestString(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		limit int
		want  string
	}{
		{"short stays", "llama3-8b", 16, "llama3-8b"},
		{"exact stays", "abcd", 4, "abcd"},
		{"cut with marker", strings.Repeat("a", 100), 20, "aaaaa…(+95 bytes)"},
		{"never splits a rune", "ééééééééééééééééé", 20, "ééé…(+28 bytes)"},
		{"tiny limit keeps the marker", strings.Repeat("x", 50), 3, "…(+50 bytes)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := bound.String(tt.in, tt.limit)
			if got != tt.want {
				t.Errorf("String(%q, %d) = %q, want %q", tt.in, tt.limit, got, tt.want)
			}
			if !utf8.ValidString(got) {
				t.Errorf("String(%q, %d) = %q: not valid UTF-8", tt.in, tt.limit, got)
			}
			if len(tt.in) > tt.limit && tt.limit >= 16 && len(got) > tt.limit {
				t.Errorf("String(..., %d) is %d bytes: over the limit", tt.limit, len(got))
			}
		})
	}
}

func TestStringOfHugeInput(t *testing.T) {
	in := strings.Repeat("m", 4<<20)
	got := bound.String(in, bound.Name)
	if len(got) > bound.Name || !strings.HasSuffix(got, "…(+4194067 bytes)") {
		t.Errorf("String(4 MiB, %d) = %q (%d bytes)", bound.Name, got, len(got))
	}
}
