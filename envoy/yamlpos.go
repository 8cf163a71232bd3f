package envoy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	yamlv3 "go.yaml.in/yaml/v3"
)

// protojson's errors name a position in the JSON it read: "(line L:C)",
// C in runes. ILB decodes YAML through JSON, one line, so that position
// means nothing to the person who wrote the YAML.
var jsonPosition = regexp.MustCompile(`\(line (\d+):(\d+)\): ?`)

// inYAML rewrites err, protojson's error decoding js (the JSON form of
// the YAML document data, whose own path is under prefix), to name the
// YAML line and the field path instead of the JSON position; err as it
// is when it names none or the place cannot be found.
func inYAML(err error, data, js []byte, prefix []any) error {
	msg := err.Error()
	m := jsonPosition.FindStringSubmatchIndex(msg)
	if m == nil {
		return err
	}
	line, _ := strconv.Atoi(msg[m[2]:m[3]])
	col, _ := strconv.Atoi(msg[m[4]:m[5]])
	off, ok := byteOffset(js, line, col)
	if !ok {
		return err
	}
	path := append(append([]any(nil), prefix...), jsonPathAt(js, off)...)
	at := pathString(path)
	if l := yamlLine(data, path); l > 0 {
		at = fmt.Sprintf("line %d, %s", l, at)
	}
	return &positionError{msg: msg[:m[0]] + "(" + at + "): " + msg[m[1]:], err: err}
}

// positionError is an error whose message names a YAML position; it
// unwraps to the decoder's own.
type positionError struct {
	msg string
	err error
}

func (e *positionError) Error() string { return e.msg }
func (e *positionError) Unwrap() error { return e.err }

// byteOffset is the byte offset of 1-based line and rune column in b.
func byteOffset(b []byte, line, col int) (int, bool) {
	start := 0
	for l := 1; l < line; l++ {
		i := bytes.IndexByte(b[start:], '\n')
		if i < 0 {
			return 0, false
		}
		start += i + 1
	}
	off := start
	for c := 1; c < col; c++ {
		if off >= len(b) {
			return 0, false
		}
		_, n := utf8.DecodeRune(b[off:])
		off += n
	}
	return off, true
}

// frame is one level of jsonPathAt's walk: an object (key: the last key
// read) or an array (index: the element being read).
type frame struct {
	object bool
	key    string
	index  int
	keyed  bool // object: the next token is a value
}

// jsonPathAt is the path (object keys as strings, array indexes as ints)
// of the token at byte offset off of js.
func jsonPathAt(js []byte, off int) []any {
	dec := json.NewDecoder(bytes.NewReader(js))
	var stack []frame
	path := func() []any {
		out := make([]any, 0, len(stack))
		for _, f := range stack {
			switch {
			case f.object && f.key != "":
				out = append(out, f.key)
			case !f.object:
				out = append(out, f.index)
			}
		}
		return out
	}
	// value ends a value in the innermost frame.
	value := func() {
		if n := len(stack); n > 0 {
			if stack[n-1].object {
				stack[n-1].keyed = false
			} else {
				stack[n-1].index++
			}
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return path()
		}
		n := len(stack)
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{', '[':
				if int(dec.InputOffset()) > off { // the container itself
					return path()
				}
				stack = append(stack, frame{object: t == '{'})
			default:
				stack = stack[:n-1]
				value()
			}
		case string:
			if n > 0 && stack[n-1].object && !stack[n-1].keyed {
				stack[n-1].key, stack[n-1].keyed = t, true
				if int(dec.InputOffset()) > off { // the key itself
					return path()
				}
				continue
			}
			value()
		default:
			value()
		}
		if int(dec.InputOffset()) > off {
			return path()
		}
	}
}

// yamlLine is the line of the node at path in the YAML document data,
// or of the deepest node on the way that exists; 0 when data does not
// parse.
func yamlLine(data []byte, path []any) int {
	var doc yamlv3.Node
	if err := yamlv3.Unmarshal(data, &doc); err != nil || len(doc.Content) == 0 {
		return 0
	}
	n, line := doc.Content[0], doc.Content[0].Line
	for _, p := range path {
		for n.Kind == yamlv3.AliasNode && n.Alias != nil {
			n = n.Alias
		}
		var next *yamlv3.Node
		switch k := p.(type) {
		case string:
			if n.Kind != yamlv3.MappingNode {
				return line
			}
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == k {
					line, next = n.Content[i].Line, n.Content[i+1]
					break
				}
			}
		case int:
			if n.Kind != yamlv3.SequenceNode || k >= len(n.Content) {
				return line
			}
			next = n.Content[k]
			line = next.Line
		}
		if next == nil {
			return line
		}
		n = next
	}
	return line
}

// pathString writes path as Envoy's field paths read: a.b[0].c.
func pathString(path []any) string {
	var b strings.Builder
	for _, p := range path {
		switch k := p.(type) {
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(k)
		case int:
			fmt.Fprintf(&b, "[%d]", k)
		}
	}
	if b.Len() == 0 {
		return "the document"
	}
	return b.String()
}
