package envoysim

import (
	"strings"
	"testing"

	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestCanonicalPath: normalize_path's canonicalisation. The first cases
// are Envoy's own (test/common/http/path_utility_test.cc), then the paths
// of ILB's smuggling corpus and the character classes.
func TestCanonicalPath(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
		refused        bool
	}{
		{name: "already normal", in: "/x/y/z", want: "/x/y/z"},
		{name: "parent dir", in: "/a/b/../c", want: "/a/c"},
		{name: "current dir", in: "/a/b/./c", want: "/a/b/c"},
		{name: "no leading slash", in: "a/b/../c", want: "/a/c"},
		{name: "too many parents stop at the root", in: "/a/b/../../../../c", want: "/c"},
		{name: "backslash separates dot segments", in: `/a/..\c`, want: "/c"},
		{name: "escaped high bytes kept", in: "/%c0%af", want: "/%c0%af"},
		{name: "escaped reserved characters kept", in: "/%5c%25", want: "/%5c%25"},
		{name: "escaped dot-dot", in: "/a/b/%2E%2E/c", want: "/a/c"},
		{name: "no case normalisation", in: "/A/B/C", want: "/A/B/C"},
		{name: "escaped slashes kept with their case", in: "/a/%2F%2f/c", want: "/a/%2F%2f/c"},
		{name: "dot-dot with parameters", in: "/xyz/..;foo=bar/abc", want: "/abc"},
		{name: "leading dot-dot with parameters", in: "/..;foo=bar/abc", want: "/abc"},
		{name: "trailing dot-dot with parameters", in: "/xyz/..;foo=bar", want: "/"},
		{name: "dot with parameters", in: "/xyz/.;foo=bar/abc", want: "/xyz/abc"},
		{name: "trailing dot with parameters", in: "/xyz/.;foo=bar", want: "/xyz/"},
		{name: "dot segments with parameters and a query", in: "/xyz/..;foo=bar/.;fff=zzz?blah=woops", want: "/?blah=woops"},
		{name: "a parameter on a name is kept", in: "/xyz/..;foo=bar/.;fff=zzz/remain;blah-bluh?query", want: "/remain;blah-bluh?query"},
		{name: "escaped NUL in a dot segment", in: "/xyz/.%00../abc", refused: true},
		{name: "escaped NULs", in: "/xyz/%00.%00./abc", refused: true},
		{name: "NUL after a bad escape", in: "/xyz/AAAAA%%0000/abc", refused: true},
		{name: "raw NUL", in: "/a\x00b", refused: true},

		{name: "an escaped letter is decoded", in: "/v1/chat/completion%73", want: "/v1/chat/completions"},
		{name: "escaped unreserved marks are decoded", in: "/%41%7a%30%2d%5f%7E", want: "/Az0-_~"},
		{name: "dot-dot to the engine's metrics", in: "/v1/../metrics", want: "/metrics"},
		{name: "escaped dot-dot to the engine's metrics", in: "/v1/%2e%2e/metrics", want: "/metrics"},
		{name: "half-escaped dot-dot is a name", in: "/v1/..%2fmetrics", want: "/v1/..%2fmetrics"},
		{name: "an escaped dot in a name is decoded", in: "/v1/a%2ejson", want: "/v1/a.json"},
		{name: "a dot segment", in: "/v1/./chat/completions", want: "/v1/chat/completions"},
		{name: "a trailing dot-dot", in: "/v1/chat/..", want: "/v1/"},
		{name: "dots in a name", in: "/v1/...", want: "/v1/..."},
		{name: "a path parameter is kept", in: "/v1/chat/completions;x", want: "/v1/chat/completions;x"},
		{name: "slashes are not merged", in: "/v1//chat/completions", want: "/v1//chat/completions"},
		{name: "a backslash is a slash", in: `/v1/chat\completions`, want: "/v1/chat/completions"},
		{name: "an escaped backslash is kept", in: "/v1/chat%5Ccompletions", want: "/v1/chat%5Ccompletions"},
		{name: "an escaped model id is kept", in: "/v1/models/org%2Fmodel", want: "/v1/models/org%2Fmodel"},
		{name: "the query is untouched", in: "/v1/a/../b?x=%2e%2e/../%73", want: "/v1/b?x=%2e%2e/../%73"},
		{name: "a bad escape keeps its percent", in: "/v1/chat/completions%zz", want: "/v1/chat/completions%zz"},
		{name: "a truncated escape", in: "/v1/a%4", want: "/v1/a%4"},
		{name: "a nested escape cannot form", in: "/%%30%30", want: "/%2500"},
		{name: "a nested escape across one byte", in: "/%3%30", want: "/%2530"},
		{name: "space and quotes are escaped", in: "/a b\"<>`{|}^", want: "/a%20b%22%3C%3E%60%7B%7C%7D%5E"},
		{name: "control bytes and DEL are escaped", in: "/a\x01\x7f", want: "/a%01%7F"},
		{name: "raw high bytes are escaped", in: "/caf\xc3\xa9", want: "/caf%C3%A9"},
		{name: "sub-delims are kept", in: "/a:b@c!$&'()*+,;=[]", want: "/a:b@c!$&'()*+,;=[]"},
		{name: "other escapes are kept", in: "/%3B%20%25%3f", want: "/%3B%20%25%3f"},
		{name: "empty", in: "", want: "/"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := canonicalPath(c.in)
			if ok == c.refused {
				t.Fatalf("canonicalPath(%q) = %q, accepted %v; want accepted %v", c.in, got, ok, !c.refused)
			}
			if !c.refused && got != c.want {
				t.Errorf("canonicalPath(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

// TestMergeSlashes: Envoy's cases (PathUtilityTest.MergeSlashes).
func TestMergeSlashes(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"empty", "", ""},
		{"relative", "a//b/c", "a/b/c"},
		{"ends with slash", "/a//b/c/", "/a/b/c/"},
		{"relative ends with slash", "a//b/c/", "a/b/c/"},
		{"no-op", "/a", "/a"},
		{"double slash start", "//a/b/c", "/a/b/c"},
		{"double slash in the middle", "/a//b/c", "/a/b/c"},
		{"double slash end", "/a/b/c//", "/a/b/c/"},
		{"triple slash", "/a///b/c", "/a/b/c"},
		{"quadruple slash", "/a////b/c", "/a/b/c"},
		{"the query is ignored", "/a//b?a=///c", "/a/b?a=///c"},
		{"empty query", "/a//b?", "/a/b?"},
		{"trailing slash and query", "//a/?b", "/a/?b"},
		{"ILB's corpus", "/v1//chat/completions", "/v1/chat/completions"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := mergeSlashes(c.in); got != c.want {
				t.Errorf("mergeSlashes(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

// TestUnescapeSlashes: Envoy's cases (PathUtilityTest.UnescapeSlashes).
func TestUnescapeSlashes(t *testing.T) {
	for _, c := range []struct {
		name, in, want string
		found          bool
	}{
		{"empty", "", "", false},
		{"case-insensitive", "%2f%2F", "//", true},
		{"between other characters", "/a%2Fb%2fc/", "/a/b/c/", true},
		{"not a slash", "%2b", "%2b", false},
		{"plain", "/a/b/c", "/a/b/c", false},
		{"incomplete", "/abc%2", "/abc%2", false},
		{"a lone percent", "foo%", "foo%", false},
		{"double escape", "%%2fa/", "%/a/", true},
		{"incomplete escape before", "%2%2fa/", "%2/a/", true},
		{"backslashes", "/a%5Cb%5cc/", `/a\b\c/`, true},
		{"dots stay escaped", "/x/%2E%2e/z%2f%2Fabc%5C../def", `/x/%2E%2e/z//abc\../def`, true},
		{"the query is untouched", "%2fa%5Cb%2fc%5c?%2fabcd%5C%%2f%", `/a\b/c\?%2fabcd%5C%%2f%`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, found := unescapeSlashes(c.in)
			if got != c.want || found != c.found {
				t.Errorf("unescapeSlashes(%q) = %q, %v; want %q, %v", c.in, got, found, c.want, c.found)
			}
		})
	}
}

// TestMaybeNormalizePath: the order of the steps (fragment, escaped
// slashes, normalize_path, merge_slashes) and each action, on ILB's
// smuggling corpus (test/smuggle_test.go).
func TestMaybeNormalizePath(t *testing.T) {
	const (
		keep     = hcmv3.HttpConnectionManager_KEEP_UNCHANGED
		reject   = hcmv3.HttpConnectionManager_REJECT_REQUEST
		redirect = hcmv3.HttpConnectionManager_UNESCAPE_AND_REDIRECT
		forward  = hcmv3.HttpConnectionManager_UNESCAPE_AND_FORWARD
	)
	configs := map[string]pathNormalization{
		"off":          {escapedSlashes: keep},
		"normalize":    {normalize: true, escapedSlashes: keep},
		"merge":        {merge: true, escapedSlashes: keep},
		"ilb":          {normalize: true, merge: true, escapedSlashes: forward},
		"reject":       {normalize: true, merge: true, escapedSlashes: reject},
		"redirect":     {normalize: true, merge: true, escapedSlashes: redirect},
		"forward only": {escapedSlashes: forward},
	}
	type want struct {
		path    string
		verdict pathVerdict
	}
	same := func(p string) want { return want{p, pathContinue} }
	for _, c := range []struct {
		name, path string
		want       map[string]want // by config; a config absent: the path unchanged, continue
	}{
		{"an escaped letter", "/v1/chat/completion%73", map[string]want{
			"normalize": same("/v1/chat/completions"), "ilb": same("/v1/chat/completions"),
			"reject": same("/v1/chat/completions"), "redirect": same("/v1/chat/completions"),
		}},
		{"an escaped slash", "/v1/chat%2Fcompletions", map[string]want{
			"ilb": same("/v1/chat/completions"), "reject": {"/v1/chat/completions", pathReject},
			"redirect": {"/v1/chat/completions", pathRedirect}, "forward only": same("/v1/chat/completions"),
		}},
		{"a path parameter", "/v1/chat/completions;x", nil},
		{"dot segments", "/v1/../metrics", map[string]want{
			"normalize": same("/metrics"), "ilb": same("/metrics"), "reject": same("/metrics"), "redirect": same("/metrics"),
		}},
		{"escaped dot segments", "/v1/%2e%2e/metrics", map[string]want{
			"normalize": same("/metrics"), "ilb": same("/metrics"), "reject": same("/metrics"), "redirect": same("/metrics"),
		}},
		{"half-escaped dot segments", "/v1/..%2fmetrics", map[string]want{
			"ilb": same("/metrics"), "reject": {"/v1/../metrics", pathReject}, "redirect": {"/metrics", pathRedirect},
			"forward only": same("/v1/../metrics"),
		}},
		{"dot-dot with a parameter", "/v1/..;x/metrics", map[string]want{
			"normalize": same("/metrics"), "ilb": same("/metrics"), "reject": same("/metrics"), "redirect": same("/metrics"),
		}},
		{"a double slash", "/v1//chat/completions", map[string]want{
			"merge": same("/v1/chat/completions"), "ilb": same("/v1/chat/completions"),
			"reject": same("/v1/chat/completions"), "redirect": same("/v1/chat/completions"),
		}},
		{"escaped double slash", "/v1/%2F%2fchat/completions", map[string]want{
			"ilb": same("/v1/chat/completions"), "reject": {"/v1///chat/completions", pathReject},
			"redirect": {"/v1/chat/completions", pathRedirect}, "forward only": same("/v1///chat/completions"),
		}},
		{"an escaped backslash", "/v1/chat%5Ccompletions", map[string]want{
			"ilb": same("/v1/chat/completions"), "reject": {`/v1/chat\completions`, pathReject},
			"redirect": {"/v1/chat/completions", pathRedirect}, "forward only": same(`/v1/chat\completions`),
		}},
		{"an escaped model id", "/v1/models/org%2Fmodel", map[string]want{
			"ilb": same("/v1/models/org/model"), "reject": {"/v1/models/org/model", pathReject},
			"redirect": {"/v1/models/org/model", pathRedirect}, "forward only": same("/v1/models/org/model"),
		}},
		{"an escaped NUL", "/v1/chat/completions%00", map[string]want{
			"normalize": {"", pathReject}, "ilb": {"", pathReject}, "reject": {"", pathReject}, "redirect": {"", pathReject},
		}},
		{"the query is untouched", "/v1//a/../chat/completions?next=%2F..//%73", map[string]want{
			"normalize": same("/v1//chat/completions?next=%2F..//%73"), "merge": same("/v1/a/../chat/completions?next=%2F..//%73"),
			"ilb": same("/v1/chat/completions?next=%2F..//%73"), "reject": same("/v1/chat/completions?next=%2F..//%73"),
			"redirect": same("/v1/chat/completions?next=%2F..//%73"),
		}},
	} {
		for cfg, p := range configs {
			t.Run(c.name+"/"+cfg, func(t *testing.T) {
				w, ok := c.want[cfg]
				if !ok {
					w = same(c.path)
				}
				got, v := p.apply(c.path)
				if v != w.verdict || (v != pathReject || w.path != "") && got != w.path {
					t.Errorf("%s: apply(%q) = %q, verdict %d; want %q, verdict %d", cfg, c.path, got, v, w.path, w.verdict)
				}
			})
		}
	}
	// A fragment is refused whatever the configuration
	// (envoy.reloadable_features.http_reject_path_with_fragment).
	for cfg, p := range configs {
		if _, v := p.apply("/v1/chat/completions#x"); v != pathReject {
			t.Errorf("%s: a fragment: verdict %d, want refused", cfg, v)
		}
	}
}

// TestCompilePathNormalization: the three fields are read independently,
// IMPLEMENTATION_SPECIFIC_DEFAULT is KEEP_UNCHANGED, and a value outside
// the enum is refused, naming the field.
func TestCompilePathNormalization(t *testing.T) {
	p, err := compilePathNormalization(&hcmv3.HttpConnectionManager{MergeSlashes: true})
	if err != nil || p.normalize || !p.merge || p.escapedSlashes != hcmv3.HttpConnectionManager_KEEP_UNCHANGED {
		t.Errorf("merge_slashes alone: %+v, %v", p, err)
	}
	p, err = compilePathNormalization(&hcmv3.HttpConnectionManager{
		NormalizePath: wrapperspb.Bool(true), PathWithEscapedSlashesAction: hcmv3.HttpConnectionManager_UNESCAPE_AND_FORWARD,
	})
	if err != nil || !p.normalize || p.merge || p.escapedSlashes != hcmv3.HttpConnectionManager_UNESCAPE_AND_FORWARD {
		t.Errorf("normalize_path and UNESCAPE_AND_FORWARD: %+v, %v", p, err)
	}
	_, err = compilePathNormalization(&hcmv3.HttpConnectionManager{PathWithEscapedSlashesAction: 9})
	if err == nil || !strings.Contains(err.Error(), "path_with_escaped_slashes_action 9") {
		t.Errorf("an undefined action: %v", err)
	}
}
