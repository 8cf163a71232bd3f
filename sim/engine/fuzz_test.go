package engine

import (
	"encoding/json"
	"net/http"
	"testing"
)

// FuzzDecode feeds arbitrary bodies to the three request decoders: none
// may panic, an accepted request must satisfy the limits, and a rejection
// must be a well-formed 400.
func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `null`, `[]`, `"x"`, `{"model":`,
		`{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"}]}]}`,
		`{"model":"m","messages":[{"role":"assistant","content":null}],"max_completion_tokens":4096,"n":1}`,
		`{"model":"m","prompt":["a","b"],"max_tokens":1}`,
		`{"model":"m","prompt":[1,2,3]}`,
		`{"model":"m","input":["a"],"encoding_format":"base64"}`,
		`{"model":"m","max_tokens":1e3,"stream":"true","messages":[1]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkErr := func(name string, e *apiError) {
			if e.Status != http.StatusBadRequest || e.Message == "" || e.Type != "invalid_request_error" || e.Code == "" {
				t.Fatalf("%s: malformed error %+v", name, e)
			}
			if _, err := json.Marshal(e); err != nil {
				t.Fatalf("%s: error does not encode: %v", name, err)
			}
		}
		checkJob := func(name string, j genJob) {
			if j.model == "" || j.maxTokens < 1 || j.maxTokens > maxMaxTokens ||
				len(j.prompts) < 1 || len(j.prompts) > maxBatch || (j.includeUsage && !j.stream) {
				t.Fatalf("%s: accepted invalid job %+v", name, j)
			}
			for _, p := range j.prompts {
				if p < 1 {
					t.Fatalf("%s: prompt of %d tokens", name, p)
				}
			}
		}
		if j, e := decodeChat(body); e != nil {
			checkErr("chat", e)
		} else {
			checkJob("chat", j)
			if !j.chat || len(j.prompts) != 1 {
				t.Fatalf("chat job %+v", j)
			}
		}
		if j, e := decodeCompletion(body); e != nil {
			checkErr("completion", e)
		} else {
			checkJob("completion", j)
		}
		if j, e := decodeEmbedding(body); e != nil {
			checkErr("embedding", e)
		} else if j.model == "" || len(j.inputs) < 1 || len(j.inputs) > maxBatch {
			t.Fatalf("accepted invalid embedding job %+v", j)
		}
	})
}
