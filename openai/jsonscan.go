package openai

import (
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
