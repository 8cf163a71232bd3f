// Package bound cuts strings that come from clients and peers to a size
// that is safe to keep in memory, logs, metrics and error bodies.
package bound

import (
	"strconv"
	"unicode/utf8"
)

// Sizes ILB uses for strings from outside, in bytes.
const (
	Name    = 256  // model names, sources, clusters, node ids, request ids
	Path    = 1024 // request paths
	Message = 1024 // error messages and details from peers
	Excerpt = 64   // a value echoed in an error body
)

// String returns s when it is at most max bytes long; otherwise the
// longest prefix of s that ends on a rune boundary and, with the marker
// "…(+N bytes)" naming how many bytes were cut, fits in max bytes. The
// result never shares memory with a cut s, so keeping it does not keep s
// alive. max below the marker's size is raised to fit it.
func String(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	// The marker of the whole length is at least as long as the marker of
	// what is cut, so the result fits.
	marker := len("…(+") + len(strconv.Itoa(len(s))) + len(" bytes)")
	keep := max(0, limit-marker)
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	// Concatenation copies: the result does not alias s.
	return s[:keep] + "…(+" + strconv.Itoa(len(s)-keep) + " bytes)"
}

// Quote is strconv.Quote of String(s, limit): for values echoed in
// messages.
func Quote(s string, limit int) string { return strconv.Quote(String(s, limit)) }
