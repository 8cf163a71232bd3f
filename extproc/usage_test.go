package extproc

import (
	"strings"
	"testing"
)

// TestDocScanner: documents are counted and the top-level usage read
// whatever the chunking; look-alikes inside strings or nested objects
// are not usage.
func TestDocScanner(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		docs  int64
		usage usage
	}{
		{"one JSON body", `{"id":"x","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`, 1, usage{7, 3, true}},
		{"server-sent events", "data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n", 3, usage{5, 2, true}},
		{"usage null", `{"usage":null,"x":{"usage":{"prompt_tokens":1,"completion_tokens":1}}}`, 1, usage{}},
		{"nested usage is not the response's", `{"choices":[{"usage":{"prompt_tokens":1,"completion_tokens":1}}]}`, 1, usage{}},
		{"usage inside generated text", `{"choices":[{"delta":{"content":"{\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":99}}"}}]}`, 1, usage{}},
		{"a value named usage", `{"object":"usage","u":"usage"}`, 1, usage{}},
		{"escaped key", `{"us\u0061ge":{"prompt_tokens":1,"completion_tokens":1}}`, 1, usage{}},
		{"key with a usage prefix", `{"usage_x":{"prompt_tokens":1,"completion_tokens":1},"usag":{"prompt_tokens":1,"completion_tokens":1}}`, 1, usage{}},
		{"negative counts ignored", `{"usage":{"prompt_tokens":-1,"completion_tokens":2}}`, 1, usage{}},
		{"fractional counts ignored", `{"usage":{"prompt_tokens":1.5,"completion_tokens":2}}`, 1, usage{}},
		{"missing count ignored", `{"usage":{"prompt_tokens":4}}`, 1, usage{}},
		{"strings with braces and escapes", `{"a":"}{\\\"","usage":{"prompt_tokens":2,"completion_tokens":9,"d":{"x":"}"}}}`, 1, usage{2, 9, true}},
		{"oversized usage ignored", `{"usage":{"prompt_tokens":1,"completion_tokens":1,"pad":"` + strings.Repeat("x", maxUsageBytes) + `"}}`, 1, usage{}},
		{"the last usage wins", "data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}\n\ndata: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\n", 2, usage{1, 2, true}},
		{"not JSON", "hello world [1,2] ] } ]", 0, usage{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, size := range []int{1, 2, 3, 7, 64, len(tt.in)} {
				var d docScanner
				for i := 0; i < len(tt.in); i += size {
					d.feed([]byte(tt.in[i:min(i+size, len(tt.in))]))
				}
				if d.docs != tt.docs || d.usage != tt.usage {
					t.Errorf("chunks of %d: docs %d, usage %+v; want %d, %+v", size, d.docs, d.usage, tt.docs, tt.usage)
				}
			}
		})
	}
}

// FuzzDocScanner: whatever the bytes, the scanner neither panics nor
// depends on how the stream is cut, and its usage object stays bounded.
func FuzzDocScanner(f *testing.F) {
	f.Add([]byte(`{"usage":{"prompt_tokens":7,"completion_tokens":3}}`), uint8(3))
	f.Add([]byte("data: {\"a\":\"\\\"}\"}\n\ndata: [DONE]\n\n"), uint8(1))
	f.Fuzz(func(t *testing.T, in []byte, cut uint8) {
		var whole, parts docScanner
		whole.feed(in)
		step := int(cut)%17 + 1
		for i := 0; i < len(in); i += step {
			parts.feed(in[i:min(i+step, len(in))])
		}
		if whole.docs != parts.docs || whole.usage != parts.usage {
			t.Fatalf("whole: %d docs, %+v; in chunks of %d: %d docs, %+v", whole.docs, whole.usage, step, parts.docs, parts.usage)
		}
		if cap(whole.capture) > 2*maxUsageBytes {
			t.Fatalf("usage buffer grew to %d bytes", cap(whole.capture))
		}
	})
}

// BenchmarkDocScanner: the cost of reading a streamed response, per
// byte (b.SetBytes): 300 vLLM-style chunks.
func BenchmarkDocScanner(b *testing.B) {
	var sb strings.Builder
	for i := range 300 {
		sb.WriteString(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"llama","choices":[{"index":0,"delta":{"content":" word`)
		sb.WriteByte(byte('a' + i%26))
		sb.WriteString(`"},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	}
	in := []byte(sb.String())
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		var d docScanner
		d.feed(in)
		if d.docs != 300 {
			b.Fatal(d.docs)
		}
	}
}
