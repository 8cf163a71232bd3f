package extproc

import "testing"

// TestAmbiguousPath tables the paths an engine could read otherwise than
// ILB (issue 24: model smuggling through the path) and the plain ones.
func TestAmbiguousPath(t *testing.T) {
	prefixes := []string{"/v1/"}
	for _, c := range []struct {
		name, path string
		refused    bool
	}{
		{"plain chat", "/v1/chat/completions", false},
		{"a query with escapes", "/v1/chat/completions?x=%2F..;", false},
		{"an escaped model id", "/v1/models/meta-llama%2FLlama-3.1-8B-Instruct", false},
		{"a trailing slash", "/v1/chat/completions/", false},
		{"an escaped letter", "/v1/chat/completion%73", true},
		{"an escaped slash", "/v1/chat%2Fcompletions", true},
		{"a path parameter", "/v1/chat/completions;x", true},
		{"a dot-dot segment", "/v1/../metrics", true},
		{"an escaped dot-dot", "/v1/%2e%2e/metrics", true},
		{"a half-escaped dot-dot", "/v1/..%2fmetrics", true},
		{"a dot segment", "/v1/./chat/completions", true},
		{"a double slash", "/v1//chat/completions", true},
		{"a backslash", "/v1/chat\\completions", true},
		{"an escaped backslash", "/v1/chat%5Ccompletions", true},
		{"a malformed escape", "/v1/chat/completions%zz", true},
		{"an escaped control byte", "/v1/chat/completions%00", true},
		{"a fragment", "/v1/chat/completions#x", true},
		{"an escape leaving the prefix", "/v1%2Fchat/completions", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			why := ambiguousPath(c.path, prefixes)
			if (why != "") != c.refused {
				t.Errorf("ambiguousPath(%q) = %q; refused want %v", c.path, why, c.refused)
			}
		})
	}
}
