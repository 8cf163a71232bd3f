package openai

import (
	"encoding/binary"
	"math/bits"
	"strconv"
)

// The request body is read in one pass that validates the whole JSON
// text exactly as encoding/json does (same syntax errors, same byte
// offsets) but keeps only where the top-level values ILB reads are: a
// prompt of a megabyte is skipped over, 32 bytes at a time, and never
// decoded or copied. ParseBody then turns those spans into a Body with
// encoding/json's rules (see request.go).

// bodyField is a top-level field of an OpenAI request that ILB reads.
type bodyField uint8

const (
	fieldNone bodyField = iota
	fieldModel
	fieldStream
	fieldMaxTokens
	fieldMaxCompletionTokens
	fieldUser
	fieldPromptCacheKey
	fieldMessages
	fieldPrompt
	fieldInput
	numFields
)

// fieldNames are the fields' JSON names; fieldFolded the same as
// encoding/json folds them to match keys (ASCII upper case).
var (
	fieldNames = [numFields]string{
		"", "model", "stream", "max_tokens", "max_completion_tokens", "user", "prompt_cache_key", "messages", "prompt", "input",
	}
	fieldFolded = func() (out [numFields]string) {
		for f, n := range fieldNames {
			out[f] = string(foldName([]byte(n)))
		}
		return out
	}()
)

// maxFieldKey bounds the quoted key that can name a field: 21 runes
// (max_completion_tokens), each at most 6 bytes (a \u escape).
const maxFieldKey = 2 + 6*21

// syntaxError is encoding/json's SyntaxError: its message and the number
// of bytes read when it occurred.
type syntaxError struct {
	msg    string
	offset int
}

// maxNestingDepth is encoding/json's bound on nested arrays and objects.
const maxNestingDepth = 10000

// errAt is the syntax error of byte c at data[i], in context.
func errAt(c byte, i int, context string) *syntaxError {
	return &syntaxError{msg: "invalid character " + quoteChar(c) + " " + context, offset: i + 1}
}

// errEnd is the syntax error of a text that ends in context: encoding/json
// feeds its scanner a space at the end.
func errEnd(data []byte, context string) *syntaxError {
	return &syntaxError{msg: "invalid character ' ' " + context, offset: len(data)}
}

func errUnexpectedEnd(data []byte) *syntaxError {
	return &syntaxError{msg: "unexpected end of JSON input", offset: len(data)}
}

// quoteChar formats c as encoding/json does in its syntax errors.
func quoteChar(c byte) string {
	if c == '\'' {
		return `'\''`
	}
	if c == '"' {
		return `'"'`
	}
	s := strconv.Quote(string(rune(c)))
	return "'" + s[1:len(s)-1] + "'"
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

func skipSpace(data []byte, i int) int {
	for i < len(data) && isSpace(data[i]) {
		i++
	}
	return i
}

// bodyScan is the result of scanning a request body.
type bodyScan struct {
	// vals holds the raw JSON of the last value of each field in the
	// top-level object (nil: absent), as encoding/json keeps the last of
	// duplicate keys.
	vals [numFields][]byte
	// typeErr is the first value, in document order, that encoding/json
	// could not store in its field (or the top-level value, when it is not
	// an object); nil if none.
	typeErr *typeError
	// ambiguous is the first field, in document order, whose key an
	// engine could read otherwise than ILB: a second key matching the
	// same field, or a key matching it only case-insensitively (Python's
	// json, vLLM's and SGLang's, is exact and keeps the last duplicate;
	// encoding/json folds case). ambiguousKey is that key, decoded.
	ambiguous    bodyField
	ambiguousKey string
	seen         [numFields]bool
}

// noteKey records a top-level key that matched field f (raw: quoted, as
// in the body), and the first ambiguity.
func (b *bodyScan) noteKey(f bodyField, raw []byte) {
	exact := string(raw[1:len(raw)-1]) == fieldNames[f] || unquote(raw) == fieldNames[f]
	if b.ambiguous == fieldNone && (b.seen[f] || !exact) {
		b.ambiguous, b.ambiguousKey = f, unquote(raw)
	}
	b.seen[f] = true
}

// typeError is encoding/json's UnmarshalTypeError as ParseBody reports
// it: the field (fieldNone: the body itself), what the JSON value is
// ("string", "number 1.5", ...) and what the field wants.
type typeError struct {
	field bodyField
	value string
	want  string
}

// kindOf names the JSON value that starts with c as encoding/json's type
// errors do.
func kindOf(c byte) string {
	switch c {
	case '{':
		return "object"
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "bool"
	case 'n':
		return "null"
	}
	return "number"
}

// note keeps v, the raw value of field f, and checks that encoding/json
// could store it in f's Go type: *bool, *int, *string, or
// json.RawMessage (anything). null always fits.
func (b *bodyScan) note(f bodyField, v []byte) {
	b.vals[f] = v
	if b.typeErr != nil || v[0] == 'n' {
		return
	}
	kind := kindOf(v[0])
	switch f {
	case fieldStream:
		if kind != "bool" {
			b.typeErr = &typeError{field: f, value: kind, want: "a boolean"}
		}
	case fieldMaxTokens, fieldMaxCompletionTokens:
		if kind == "number" {
			if _, err := strconv.ParseInt(string(v), 10, 64); err == nil {
				return
			}
			kind = "number " + string(v)
		}
		b.typeErr = &typeError{field: f, value: kind, want: "an integer"}
	case fieldUser, fieldPromptCacheKey:
		if kind != "string" {
			b.typeErr = &typeError{field: f, value: kind, want: "a string"}
		}
	}
}

// Scanner states: what the text must continue with.
const (
	stValue      = iota // a value
	stValueOrEnd        // after '[': a value or ']'
	stKeyOrEnd          // after '{': a key or '}'
	stKey               // after ',' in an object: a key
	stEnd               // a value ended
)

// scanBody validates data as one JSON value and notes the top-level
// fields ILB reads; the error is the one encoding/json would report.
// Work is linear in len(data) and nothing is allocated but the nesting
// stack past 64 levels.
func scanBody(data []byte) (bodyScan, *syntaxError) {
	var (
		out      bodyScan
		inline   [64]byte
		stack    = inline[:0] // '{' or '[' per open container
		st       = stValue
		i        int
		field    bodyField // the top-level field whose value is read
		valStart int       // where that value starts
		err      *syntaxError
	)
	for {
		switch st {
		case stValue, stValueOrEnd:
			if i = skipSpace(data, i); i == len(data) {
				return out, errUnexpectedEnd(data)
			}
			c := data[i]
			if st == stValueOrEnd && c == ']' {
				stack = stack[:len(stack)-1]
				i++
				st = stEnd
				continue
			}
			switch len(stack) {
			case 0: // the body is the struct: only an object or null fits
				if c != '{' && c != 'n' {
					out.typeErr = &typeError{value: kindOf(c), want: "a JSON object"}
				}
			case 1:
				valStart = i
			}
			switch {
			case c == '{' || c == '[':
				if stack = append(stack, c); len(stack) > maxNestingDepth {
					return out, errAt(c, i, "exceeded max depth")
				}
				i++
				st = stKeyOrEnd
				if c == '[' {
					st = stValueOrEnd
				}
				continue
			case c == '"':
				i, err = scanString(data, i)
			case c == '-' || '0' <= c && c <= '9':
				i, err = scanNumber(data, i)
			case c == 't':
				i, err = scanLiteral(data, i, "true")
			case c == 'f':
				i, err = scanLiteral(data, i, "false")
			case c == 'n':
				i, err = scanLiteral(data, i, "null")
			default:
				return out, errAt(c, i, "looking for beginning of value")
			}
			if err != nil {
				return out, err
			}
			st = stEnd
		case stKeyOrEnd, stKey:
			if i = skipSpace(data, i); i == len(data) {
				return out, errUnexpectedEnd(data)
			}
			c := data[i]
			if st == stKeyOrEnd && c == '}' {
				stack = stack[:len(stack)-1]
				i++
				st = stEnd
				continue
			}
			if c != '"' {
				return out, errAt(c, i, "looking for beginning of object key string")
			}
			start := i
			if i, err = scanString(data, i); err != nil {
				return out, err
			}
			if len(stack) == 1 {
				if field = matchField(data[start:i]); field != fieldNone {
					out.noteKey(field, data[start:i])
				}
			}
			if i = skipSpace(data, i); i == len(data) {
				return out, errUnexpectedEnd(data)
			}
			if data[i] != ':' {
				return out, errAt(data[i], i, "after object key")
			}
			i++
			st = stValue
		case stEnd:
			if len(stack) == 1 && field != fieldNone {
				out.note(field, data[valStart:i:i])
				field = fieldNone
			}
			i = skipSpace(data, i)
			if len(stack) == 0 {
				if i < len(data) {
					return out, errAt(data[i], i, "after top-level value")
				}
				return out, nil
			}
			if i == len(data) {
				return out, errUnexpectedEnd(data)
			}
			c := data[i]
			switch {
			case c == ',':
				st = stValue
				if stack[len(stack)-1] == '{' {
					st = stKey
				}
			case c == '}' && stack[len(stack)-1] == '{', c == ']' && stack[len(stack)-1] == '[':
				stack = stack[:len(stack)-1]
			case stack[len(stack)-1] == '{':
				return out, errAt(c, i, "after object key:value pair")
			default:
				return out, errAt(c, i, "after array element")
			}
			i++
		}
	}
}

// SWAR constants: every byte 0x01, 0x80, and the bytes a string stops at.
const (
	swarOnes  = 0x0101010101010101
	swarHighs = 0x8080808080808080
	swarQuote = '"' * swarOnes
	swarSlash = '\\' * swarOnes
	swarSpace = ' ' * swarOnes
)

// special8 flags, in the high bit of each byte of v, the bytes a string
// stops at: a quote, a backslash, a byte below 0x20. The lowest flagged
// byte is exact (higher ones may be false positives: a borrow).
func special8(v uint64) uint64 {
	q, s := v^swarQuote, v^swarSlash
	return (((q - swarOnes) &^ q) | ((s - swarOnes) &^ s) | ((v - swarSpace) &^ v)) & swarHighs
}

// simpleEscape marks the letters of the two-byte escapes (\" \\ \/ \b \f
// \n \r \t).
var simpleEscape = [256]bool{'"': true, '\\': true, '/': true, 'b': true, 'f': true, 'n': true, 'r': true, 't': true}

// gather moves the high bit of each byte of m (special8's flags) to one
// bit per byte (bit k for byte k) in one multiplication: the partial
// products land on distinct bits, so nothing carries.
func gather(m uint64) uint64 { return m * 0x0002040810204081 >> 56 }

// scanString skips the string that starts at data[i] ('"') and returns
// the index after its closing quote. It flags the quotes, backslashes and
// control bytes of 64 bytes at once (a window without any is passed in
// one step) and steps from one flag to the next within the window: a
// two-byte escape costs no new window. A flag past the first of its word
// may be false (a borrow): its byte is looked at before it counts.
// Anything else than a two-byte escape or the closing quote (a control
// byte, a \u or bad escape, the last 63 bytes) is read a byte at a time,
// eight at once between stops, with encoding/json's errors. Other bytes
// (invalid UTF-8 included, as encoding/json's scanner) pass.
func scanString(data []byte, i int) (int, *syntaxError) {
	j := i + 1
	for {
	window:
		for j+64 <= len(data) {
			b := data[j : j+64 : j+64]
			m0 := special8(binary.LittleEndian.Uint64(b[0:8]))
			m1 := special8(binary.LittleEndian.Uint64(b[8:16]))
			m2 := special8(binary.LittleEndian.Uint64(b[16:24]))
			m3 := special8(binary.LittleEndian.Uint64(b[24:32]))
			m4 := special8(binary.LittleEndian.Uint64(b[32:40]))
			m5 := special8(binary.LittleEndian.Uint64(b[40:48]))
			m6 := special8(binary.LittleEndian.Uint64(b[48:56]))
			m7 := special8(binary.LittleEndian.Uint64(b[56:64]))
			if m0|m1|m2|m3|m4|m5|m6|m7 == 0 {
				j += 64
				continue
			}
			stops := gather(m0) | gather(m1)<<8 | gather(m2)<<16 | gather(m3)<<24 |
				gather(m4)<<32 | gather(m5)<<40 | gather(m6)<<48 | gather(m7)<<56
			for stops != 0 {
				k := bits.TrailingZeros64(stops)
				switch b[k] {
				case '"':
					return j + k + 1, nil
				case '\\':
					if k+1 < len(b) && simpleEscape[b[k+1]] {
						stops &= ^uint64(0) << (k + 2) // past the escaped byte
						continue
					}
					if k+1 == len(b) && j+k+1 < len(data) && simpleEscape[data[j+k+1]] {
						j += k + 2 // the escaped byte starts the next window
						continue window
					}
				default:
					if b[k] >= 0x20 { // a false flag
						stops &= stops - 1
						continue
					}
				}
				j += k // a control byte or another escape
				break window
			}
			j += 64
		}
		for j+8 <= len(data) {
			if m := special8(binary.LittleEndian.Uint64(data[j : j+8])); m != 0 {
				j += bits.TrailingZeros64(m) / 8
				break
			}
			j += 8
		}
		if j == len(data) {
			return j, errUnexpectedEnd(data)
		}
		switch c := data[j]; {
		case c == '"':
			return j + 1, nil
		case c == '\\':
			j++
			if j == len(data) {
				return j, errEnd(data, "in string escape code")
			}
			switch data[j] {
			case 'b', 'f', 'n', 'r', 't', '\\', '/', '"':
				j++
			case 'u':
				j++
				for range 4 {
					if j == len(data) {
						return j, errEnd(data, `in \u hexadecimal character escape`)
					}
					if !isHex(data[j]) {
						return j, errAt(data[j], j, `in \u hexadecimal character escape`)
					}
					j++
				}
			default:
				return j, errAt(data[j], j, "in string escape code")
			}
		case c < 0x20:
			return j, errAt(c, j, "in string literal")
		default: // fewer than 8 bytes left
			j++
		}
	}
}

func isHex(c byte) bool { return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// skipDigits returns the index of the first non-digit from i.
func skipDigits(data []byte, i int) int {
	for i < len(data) && isDigit(data[i]) {
		i++
	}
	return i
}

// scanNumber skips the number that starts at data[i] ('-' or a digit)
// and returns the index after it; what follows is checked by the caller.
func scanNumber(data []byte, i int) (int, *syntaxError) {
	if data[i] == '-' {
		i++
		if i == len(data) {
			return i, errEnd(data, "in numeric literal")
		}
		if !isDigit(data[i]) {
			return i, errAt(data[i], i, "in numeric literal")
		}
	}
	if data[i] == '0' {
		i++
	} else {
		i = skipDigits(data, i+1)
	}
	if i < len(data) && data[i] == '.' {
		i++
		if i == len(data) {
			return i, errEnd(data, "after decimal point in numeric literal")
		}
		if !isDigit(data[i]) {
			return i, errAt(data[i], i, "after decimal point in numeric literal")
		}
		i = skipDigits(data, i+1)
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i == len(data) {
			return i, errEnd(data, "in exponent of numeric literal")
		}
		if !isDigit(data[i]) {
			return i, errAt(data[i], i, "in exponent of numeric literal")
		}
		i = skipDigits(data, i+1)
	}
	return i, nil
}

// scanLiteral skips lit (true, false or null), whose first byte is at
// data[i].
func scanLiteral(data []byte, i int, lit string) (int, *syntaxError) {
	for k := 1; k < len(lit); k++ {
		if i+k == len(data) {
			return i + k, errEnd(data, literalContext(lit, k))
		}
		if data[i+k] != lit[k] {
			return i + k, errAt(data[i+k], i+k, literalContext(lit, k))
		}
	}
	return i + len(lit), nil
}

func literalContext(lit string, k int) string {
	return "in literal " + lit + " (expecting " + quoteChar(lit[k]) + ")"
}
