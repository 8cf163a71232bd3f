package extproc

import (
	"bytes"
	"encoding/json"
)

// maxUsageBytes bounds the usage object ILB reads from a response: an
// OpenAI usage object, details included, is a few hundred bytes.
const maxUsageBytes = 1024

// usage is what an engine says it did for a request: the OpenAI usage
// object (prompt_tokens, completion_tokens).
type usage struct {
	prompt, completion int64
	ok                 bool
}

// docScanner reads a stream of JSON documents as it flows — one response
// body, or the data of server-sent events ("data: {...}\n\n", one
// document per event) — in one pass, with its state carried from chunk
// to chunk and nothing buffered but a usage object: it counts the
// documents that end, and keeps the last "usage" object found at a
// document's top level. Only top-level keys are matched, outside strings,
// so text an engine generates (always inside a string) cannot pass for
// usage. Bytes outside a document (the "data: " prefix, "[DONE]", blank
// lines) are skipped; a document must be an object. Not safe for
// concurrent use.
type docScanner struct {
	depth             int32
	inString, escaped bool
	// expectKey: at depth 1, the next string is a key; keyPos is how much
	// of "usage" the key being read matched (-1: no match).
	expectKey bool
	keying    bool
	keyPos    int8
	// usageKey: the last key at depth 1 was "usage"; wantUsage: its value
	// comes next.
	usageKey, wantUsage bool
	capturing           bool
	capture             []byte
	docs                int64
	usage               usage
}

// feed scans the next bytes of the stream.
func (d *docScanner) feed(b []byte) {
	for i := 0; i < len(b); i++ {
		c := b[i]
		if d.inString {
			if !d.keying && !d.capturing && !d.escaped {
				// Skip the body of a string in one step: generated text is
				// most of a response.
				j := bytes.IndexAny(b[i:], "\"\\")
				if j < 0 {
					return
				}
				i += j
				c = b[i]
			}
			d.stringByte(c)
			continue
		}
		if d.capturing {
			d.captureByte(c)
		}
		switch c {
		case '"':
			if d.depth == 0 {
				continue
			}
			d.inString = true
			if d.depth == 1 && d.expectKey {
				d.keying, d.keyPos = true, 0
			}
		case '{', '[':
			if d.depth == 0 && c == '[' {
				continue // [DONE]
			}
			if d.depth == 1 && c == '{' && d.wantUsage {
				d.capturing, d.capture = true, append(d.capture[:0], '{')
			}
			d.wantUsage = false
			d.depth++
			if d.depth == 1 {
				d.expectKey, d.usageKey = true, false
			}
		case '}', ']':
			if d.depth == 0 {
				continue
			}
			d.depth--
			if d.depth == 1 && d.capturing {
				d.capturing = false
				d.parseUsage()
			}
			if d.depth == 0 {
				d.docs++
			}
		case ':':
			if d.depth == 1 {
				d.expectKey, d.wantUsage = false, d.usageKey
			}
		case ',':
			if d.depth == 1 {
				d.expectKey, d.usageKey, d.wantUsage = true, false, false
			}
		case ' ', '\t', '\r', '\n':
		default:
			if d.depth == 1 {
				d.wantUsage = false // a scalar value: null, a number
			}
		}
	}
}

// stringByte is one byte inside a string.
func (d *docScanner) stringByte(c byte) {
	if d.capturing {
		d.captureByte(c)
	}
	switch {
	case d.escaped:
		d.escaped = false
		d.keyPos = -1
	case c == '\\':
		d.escaped = true
		d.keyPos = -1
	case c == '"':
		d.inString = false
		if d.keying {
			d.keying = false
			d.usageKey = d.keyPos == int8(len("usage"))
		}
	case d.keying:
		if d.keyPos >= 0 && int(d.keyPos) < len("usage") && c == "usage"[d.keyPos] {
			d.keyPos++
		} else {
			d.keyPos = -1
		}
	}
}

// captureByte keeps a byte of the usage object, giving up past
// maxUsageBytes.
func (d *docScanner) captureByte(c byte) {
	if len(d.capture) >= maxUsageBytes {
		d.capturing, d.capture = false, d.capture[:0]
		return
	}
	d.capture = append(d.capture, c)
}

// parseUsage reads the captured usage object; counts that are missing,
// negative or not integers leave the last usage found in place.
func (d *docScanner) parseUsage() {
	var u struct {
		Prompt     *int64 `json:"prompt_tokens"`
		Completion *int64 `json:"completion_tokens"`
	}
	if err := json.Unmarshal(d.capture, &u); err != nil || u.Prompt == nil || u.Completion == nil || *u.Prompt < 0 || *u.Completion < 0 {
		return
	}
	d.usage = usage{prompt: *u.Prompt, completion: *u.Completion, ok: true}
}
