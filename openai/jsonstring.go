package openai

import (
	"bytes"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// matchField returns the field a top-level key (quoted, as in the body)
// names, as encoding/json matches keys to struct fields: escapes
// decoded, then equal under its case folding (ASCII letters, and the
// Unicode runes that fold to them, such as U+017F ſ for s and U+212A K
// for k).
func matchField(raw []byte) bodyField {
	if len(raw) > maxFieldKey {
		return fieldNone
	}
	s := raw[1 : len(raw)-1]
	plain := true
	for _, c := range s {
		if c == '\\' || c >= utf8.RuneSelf {
			plain = false
			break
		}
	}
	if !plain {
		s = foldName([]byte(unquote(raw)))
	}
	for f := fieldModel; f < numFields; f++ {
		if asciiUpperEqual(s, fieldFolded[f]) {
			return f
		}
	}
	return fieldNone
}

// asciiUpperEqual reports whether s with ASCII letters in upper case is
// upper (itself upper case).
func asciiUpperEqual(s []byte, upper string) bool {
	if len(s) != len(upper) {
		return false
	}
	for k, c := range s {
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		if c != upper[k] {
			return false
		}
	}
	return true
}

// foldName is encoding/json's key folding: ASCII letters upper case, any
// other rune the smallest of its simple case-folding orbit.
func foldName(in []byte) []byte {
	out := make([]byte, 0, len(in))
	for i := 0; i < len(in); {
		if c := in[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			out = append(out, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(in[i:])
		out = utf8.AppendRune(out, foldRune(r))
		i += n
	}
	return out
}

func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}

// unquote decodes a JSON string that scanString accepted (quotes
// included) as encoding/json does: escapes decoded, a surrogate escape
// that is not half of a valid pair and every byte of invalid UTF-8
// replaced by U+FFFD.
func unquote(raw []byte) string {
	s := raw[1 : len(raw)-1]
	if bytes.IndexByte(s, '\\') < 0 && utf8.Valid(s) {
		return string(s)
	}
	b := make([]byte, 0, len(s)+2*utf8.UTFMax)
	for r := 0; r < len(s); {
		c := s[r]
		switch {
		case c == '\\' && r+1 < len(s):
			e := s[r+1]
			if e != 'u' {
				b = append(b, unescape(e))
				r += 2
				continue
			}
			rr := getu4(s[r:])
			r += 6
			if utf16.IsSurrogate(rr) {
				if dec := utf16.DecodeRune(rr, getu4(s[r:])); dec != unicode.ReplacementChar {
					b = utf8.AppendRune(b, dec)
					r += 6
					continue
				}
				rr = unicode.ReplacementChar
			}
			b = utf8.AppendRune(b, rr)
		case c < utf8.RuneSelf:
			b = append(b, c)
			r++
		default:
			rr, size := utf8.DecodeRune(s[r:])
			b = utf8.AppendRune(b, rr)
			r += size
		}
	}
	return string(b)
}

// unescape is the byte of a one-letter escape (\" \\ \/ \b \f \n \r \t).
func unescape(e byte) byte {
	switch e {
	case 'b':
		return '\b'
	case 'f':
		return '\f'
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	}
	return e
}

// getu4 decodes the \uXXXX at the start of s, or returns -1 (U+FFFD then).
func getu4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range s[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}
