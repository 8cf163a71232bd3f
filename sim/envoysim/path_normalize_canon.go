package envoysim

import "strings"

// This file is PathUtil::canonicalPath (source/common/http/path_utility.cc),
// the normalize_path step: RFC 3986 normalisation of the path part of
// :path by url::CanonicalizePath, the path canonicaliser of Chromium's URL
// library (googleurl, url/url_canon_path.cc, DoPartialPath), which Envoy
// links since it removed its fork (source/common/chromium_url; runtime
// guard envoy.reloadable_features.remove_forked_chromium_url, removed
// with its legacy code). Written from that code's rules:
//
//   - the query (from the first '?') is left untouched and appended back;
//   - a path not starting with '/' or '\' gets a leading '/';
//   - '\' is a slash: written '/', and a separator for dot segments;
//   - "." and ".." segments (a dot also spelled %2e or %2E) are resolved;
//     ".." never climbs above the root; a dot that is not a whole
//     segment is written '.', so %2e is always decoded;
//   - a percent-escape of an unreserved character (ALPHA, DIGIT, '-',
//     '_', '~') is decoded; every other valid escape (%2F, %5C, %25, %3B,
//     any byte >= 0x80 ...) is kept as written, hex case included; an
//     escape that is not two hex digits keeps its '%', and a decoded
//     character that would complete such a '%' into a new escape has the
//     '%' rewritten %25 (CheckForNestedEscapes);
//   - space, '"', '<', '>', '^', '`', '{', '|', '}', DEL, control bytes
//     and bytes >= 0x80 are percent-encoded (upper-case hex); everything
//     else, ';' and ':' included, is kept;
//   - NUL, raw or %00, fails the path: the request is answered 400 (the
//     snapshot of googleurl Envoy links marks NUL invalid; Envoy's
//     PathUtilityTest.InvalidPaths).
//
// Before it, when envoy.reloadable_features.strip_dotdot_segments_with_parameters
// is on (the default since Envoy 1.38.4 and 1.39.1, CVE-2026-73551),
// stripParametersFromDotSegments turns a segment starting "..;" into ".."
// and one starting ".;" into ".", so "/v1/..;x/metrics" is "/metrics".

// Character classes of the path canonicaliser (kPathCharLookup).
const (
	charPass     = 0 // copied as is, escaped or not
	charSpecial  = 1 // needs the slow path
	charEscape   = 2 | charSpecial
	charUnescape = 4 // an escape of it is decoded
	charInvalid  = 8 | charSpecial
)

// pathChars is kPathCharLookup: the class of every byte.
var pathChars = func() (t [256]uint8) {
	for c := range 256 {
		switch {
		case c == 0:
			t[c] = charInvalid
		case c < 0x20 || c >= 0x7f:
			t[c] = charEscape
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '~':
			t[c] = charUnescape
		case c == '.':
			t[c] = charSpecial
		case strings.IndexByte(" \"#%<>?\\^`{|}", byte(c)) >= 0:
			t[c] = charEscape
		default:
			t[c] = charPass
		}
	}
	return t
}()

// canonicalPath is PathUtil::canonicalPath on a whole :path value (query
// included): the canonical path, or false when the path is refused.
func canonicalPath(p string) (string, bool) {
	p = stripParametersFromDotSegments(p)
	path, query := p, ""
	if i := strings.IndexByte(p, '?'); i >= 0 {
		path, query = p[:i], p[i:]
	}
	out, ok := canonicalizePath(path)
	return out + query, ok
}

// stripParametersFromDotSegments is PathUtil::stripParametersFromDotSegments:
// in the path before '?' or '#', a segment starting "..;" becomes ".."
// and one starting ".;" becomes ".".
func stripParametersFromDotSegments(p string) string {
	end := strings.IndexAny(p, "?#")
	if end < 0 {
		end = len(p)
	}
	path, rest := p[:end], p[end:]
	if !strings.Contains(path, ".;") {
		return p
	}
	segs := strings.Split(path, "/")
	for i, s := range segs {
		switch {
		case strings.HasPrefix(s, "..;"):
			segs[i] = ".."
		case strings.HasPrefix(s, ".;"):
			segs[i] = "."
		}
	}
	return strings.Join(segs, "/") + rest
}

// canonicalizePath is url::CanonicalizePath (DoPath and DoPartialPath) on
// a path without its query.
func canonicalizePath(p string) (string, bool) {
	if p == "" {
		return "/", true
	}
	out := make([]byte, 0, len(p)+1)
	if !isURLSlash(p[0]) {
		out = append(out, '/')
	}
	ok := true
	lastBadPercent := -1 // index in out of a '%' that began no valid escape
	for i := 0; i < len(p); i++ {
		c := p[i]
		cls := pathChars[c]
		if cls&charSpecial == 0 {
			out = append(out, c)
			continue
		}
		if n := dotLen(p, i); n > 0 {
			if len(out) == 0 || out[len(out)-1] != '/' {
				out = append(out, '.') // part of a name
				i += n - 1
				continue
			}
			switch kind, used := classifyAfterDot(p, i+n); kind {
			case dotName:
				out = append(out, '.')
				i += n - 1
			case dotCurrent:
				i += n + used - 1
			case dotParent:
				out = backUpToPreviousSlash(out)
				if lastBadPercent >= len(out) {
					lastBadPercent = -1
				}
				i += n + used - 1
			}
			continue
		}
		switch {
		case c == '\\':
			out = append(out, '/')
		case c == '%':
			v, valid := decodeEscape(p, i)
			if !valid {
				lastBadPercent = len(out)
				out = append(out, '%')
				continue
			}
			i += 2
			vc := pathChars[v]
			if vc&charUnescape == 0 {
				out = append(out, '%', p[i-1], p[i]) // kept as written
				if vc&charInvalid == charInvalid {
					ok = false
				}
				continue
			}
			out = append(out, v)
			if lastBadPercent >= 0 && lastBadPercent+3 >= len(out) {
				out = fixNestedEscape(p, i+1, lastBadPercent, out)
			}
		case cls&charInvalid == charInvalid:
			out = appendEscaped(out, c)
			ok = false
		case cls&charEscape == charEscape:
			out = appendEscaped(out, c)
		}
	}
	return string(out), ok
}

type dotKind int

const (
	dotName    dotKind = iota // part of a file name
	dotCurrent                // "." segment
	dotParent                 // ".." segment
)

// classifyAfterDot is ClassifyAfterDot: what the dot ending before p[at]
// is, and how many more bytes of p it consumed.
func classifyAfterDot(p string, at int) (dotKind, int) {
	if at == len(p) {
		return dotCurrent, 0
	}
	if isURLSlash(p[at]) {
		return dotCurrent, 1
	}
	if n := dotLen(p, at); n > 0 {
		after := at + n
		if after == len(p) {
			return dotParent, n
		}
		if isURLSlash(p[after]) {
			return dotParent, n + 1
		}
	}
	return dotName, 0
}

// dotLen is IsDot: 1 for '.', 3 for %2e or %2E at p[i], else 0.
func dotLen(p string, i int) int {
	switch {
	case p[i] == '.':
		return 1
	case p[i] == '%' && i+3 <= len(p) && p[i+1] == '2' && (p[i+2] == 'e' || p[i+2] == 'E'):
		return 3
	}
	return 0
}

func isURLSlash(c byte) bool { return c == '/' || c == '\\' }

// backUpToPreviousSlash is BackUpToPreviousSlash: out ends with '/';
// drop its last segment, never the leading slash.
func backUpToPreviousSlash(out []byte) []byte {
	i := len(out) - 1
	if i == 0 {
		return out
	}
	for i--; i > 0 && out[i] != '/'; i-- {
	}
	return out[:i+1]
}

// decodeEscape is DecodeEscaped: the byte of the escape at p[i] ('%'
// followed by two hex digits).
func decodeEscape(p string, i int) (byte, bool) {
	if i+2 >= len(p) {
		return 0, false
	}
	hi, ok1 := unhex(p[i+1])
	lo, ok2 := unhex(p[i+2])
	return hi<<4 | lo, ok1 && ok2
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func appendEscaped(out []byte, c byte) []byte {
	const hex = "0123456789ABCDEF"
	return append(out, '%', hex[c>>4], hex[c&15])
}

// fixNestedEscape is CheckForNestedEscapes: a character was just decoded
// within two bytes after a '%' (at bad) that began no valid escape; if
// that '%' now begins one ("%%30" would read %0 then "0"), it is written
// %25 so the output cannot be decoded into something else. next is the
// index in p of the next byte to read.
func fixNestedEscape(p string, next, bad int, out []byte) []byte {
	n := len(out)
	last := out[n-1]
	appendNext := bad == n-2
	if appendNext {
		if next == len(p) || p[next] >= 0x80 {
			return out
		}
		out = append(out, p[next])
	}
	if _, valid := decodeEscape(string(out[bad:]), 0); !valid {
		return out[:n]
	}
	if !appendNext {
		out = append(out, out[bad+1])
	}
	out[bad+1], out[bad+2] = '2', '5'
	return append(out, last)
}
