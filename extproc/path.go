package extproc

import (
	"net/url"
	"strings"

	"github.com/ilbproject/ilb/openai"
)

// ambiguousPath says why a request path (query excluded) could be read
// otherwise by an engine than by ILB and Envoy's routes, or "" when it is
// unambiguous. Engines' servers (uvicorn, Go's net/http) decode
// percent-escapes, and some resolve dot segments, drop path parameters or
// merge slashes before routing, where ILB classifies the path as it
// comes: /v1/chat/completion%73 is "other" to ILB (decided on a header,
// body unread) and chat/completions to the engine. Refused:
//   - backslashes, ';' (path parameters), '#', "//", control bytes, and
//     "." or ".." segments, raw or once decoded;
//   - a malformed percent-escape;
//   - escapes whose decoding changes what ILB reads of the path: its
//     endpoint, or whether it is under a served prefix (an escaped model
//     id, GET /v1/models/org%2Fmodel, is no change).
func ambiguousPath(path string, prefixes []string) string {
	p, _, _ := strings.Cut(path, "?")
	if why := unsafePath(p); why != "" {
		return why
	}
	if !strings.Contains(p, "%") {
		return ""
	}
	d, err := url.PathUnescape(p)
	if err != nil {
		return "a malformed percent-escape"
	}
	if why := unsafePath(d); why != "" {
		return "once decoded, " + why
	}
	if openai.EndpointOf(d) != openai.EndpointOf(p) || servedPath(prefixes, d) != servedPath(prefixes, p) {
		return "percent-escapes that change the endpoint it names (" + string(openai.EndpointOf(d)) + " once decoded)"
	}
	return ""
}

// unsafePath is the first reason of ambiguousPath found in p as it is.
func unsafePath(p string) string {
	for i := range len(p) {
		switch c := p[i]; {
		case c == '\\':
			return "a backslash"
		case c == ';':
			return "a path parameter (';')"
		case c == '#':
			return "a '#'"
		case c < 0x20 || c == 0x7f:
			return "a control byte"
		}
	}
	if strings.Contains(p, "//") {
		return "an empty segment ('//')"
	}
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "." || seg == ".." {
			return "a dot segment ('" + seg + "')"
		}
	}
	return ""
}
