package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// benchSizes are the prompt sizes of the body benchmark.
var benchSizes = []int{1 << 10, 32 << 10, 256 << 10, 1 << 20}

// benchChat is a chat request whose prompt is about n bytes of text with
// a newline and quotes per sentence (escaped, as clients send it), in a
// system and a user message.
func benchChat(n int) []byte {
	const sentence = "A fox jumps over the dog; \"quoted\" words, a newline too.\n"
	text := strings.Repeat(sentence, n/len(sentence)+1)[:n]
	sys, _ := json.Marshal(text[:n/4])
	user, _ := json.Marshal(text[n/4:])
	return fmt.Appendf(nil, `{"model":"m","stream":true,"max_tokens":256,"user":"u-1",`+
		`"messages":[{"role":"system","content":%s},{"role":"user","content":%s}],"temperature":0.7}`, sys, user)
}

// BenchmarkParseBody reads a chat body of each size with ParseBody (one
// scan, only the fields ILB needs) and with the encoding/json
// implementation it replaced (impl=encoding-json), in the same run.
//
//	go test -run '^$' -bench ParseBody -benchmem -count 6 ./openai/
func BenchmarkParseBody(b *testing.B) {
	for _, n := range benchSizes {
		body := benchChat(n)
		for _, impl := range []struct {
			name  string
			parse func(Endpoint, []byte) (Body, error)
		}{{"scan", ParseBody}, {"encoding-json", parseBodyStd}} {
			b.Run(fmt.Sprintf("prompt=%dKiB/impl=%s", n>>10, impl.name), func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := impl.parse(EndpointChat, body); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestParseBodyMessagesAreBounded: a value echoed in an error is an
// excerpt, whatever its size (found reading the code: the whole value
// used to go to the message, and from there to the trace span's status).
func TestParseBodyMessagesAreBounded(t *testing.T) {
	digits := strings.Repeat("1", 1<<20)
	for name, body := range map[string]string{
		"model is a huge number":      `{"model":` + digits + `,"messages":[1]}`,
		"stream is a huge number":     `{"model":"m","stream":` + digits + `,"messages":[1]}`,
		"the body is a huge string":   `"` + digits + `"`,
		"max_tokens overflows an int": `{"model":"m","max_tokens":` + digits + `,"messages":[1]}`,
	} {
		_, err := ParseBody(EndpointChat, []byte(body))
		var re *RequestError
		if !errors.As(err, &re) || len(re.Msg) > 512 {
			t.Errorf("%s: error %T with a %d-byte message; want a RequestError of at most 512 bytes", name, err, len(fmt.Sprint(err)))
		}
	}
}
