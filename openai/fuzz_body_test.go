package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"
)

// fuzzMaxErrMsg bounds the message of a refused body: it reaches the
// client's error body and the logs, so it may quote a bounded excerpt of
// what the client sent, never all of it.
const fuzzMaxErrMsg = 2048

// fuzzMaxBody caps the repeated part of a fuzzed body.
const fuzzMaxBody = 1 << 16

// bodyFields are the request fields ParseBody may name in an error.
var bodyFields = []string{
	"", "model", "stream", "max_tokens", "max_completion_tokens", "user", "prompt_cache_key",
	"messages", "prompt", "input",
}

// FuzzRequestBody feeds arbitrary request bodies to ParseBody for every
// endpoint; a body is head + mid×n + tail, so bodies and values reach
// tens of KiB, beyond the fuzzer's small inputs. Invariants: no panic; the same bytes give the same answer; a
// refusal is a *RequestError with status 400, a code, a message of at most
// fuzzMaxErrMsg bytes and a param that is "" or a body field; an accepted
// body is a JSON object with a non-empty model no longer than the body
// once decoded (3 bytes for each invalid UTF-8 byte),
// max_tokens >= 0, and a prompt estimate of at least 1 and at most the
// body's size / 4; the OpenAI endpoints accept only bodies with their
// prompt field.
func FuzzRequestBody(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":5}`,
		`{"model":"m","prompt":["a","b"],"user":"u","max_completion_tokens":-1}`,
		`{"model":"m","input":"x","prompt_cache_key":"k","max_tokens":1e15}`,
		`{"model":"m","prompt":"p","max_tokens":9223372036854775807,"max_completion_tokens":0}`,
		`{"model":"\u00e9\ud800","messages":[],"prompt":null,"input":""}`,
		`{"model":null}`,
		`{"model":""}`,
		`{"model":12345678901234567890,"messages":[1]}`,
		`{"model":"m","stream":"yes"}`,
		`{"MODEL":"m","Messages":[{}]}`,
		`{"model":"a","model":"b","prompt":"x"}`,
		`[]`,
		`"m"`,
		`null`,
		`  `,
		`{"model":"m"`,
		"{\"model\":\"m\",\"messages\":[]}\x00",
	} {
		f.Add([]byte(s), []byte(nil), []byte(nil), uint16(0))
	}
	// Large bodies: head, then mid repeated n times, then tail.
	for _, s := range []struct {
		head, mid, tail string
		n               uint16
	}{
		{`{"model":"m","messages":[{"content":"`, "x", `"}]}`, 4096},
		{`{"model":"m","messages":[`, `{"role":"user","content":"hi"},`, `{}]}`, 500},
		{`{"model":"`, `m`, `","prompt":"p"}`, 300},
		{`{"model":"m","input":[`, `[1,2],`, `[]],"user":"u"}`, 1000},
		{`{"model":"m","prompt":"p","user":"`, `é`, `"}`, 200},
	} {
		f.Add([]byte(s.head), []byte(s.mid), []byte(s.tail), s.n)
	}
	endpoints := []Endpoint{EndpointChat, EndpointCompletions, EndpointEmbeddings, EndpointOther}
	f.Fuzz(func(t *testing.T, head, mid, tail []byte, n uint16) {
		data := head
		if len(mid)*int(n) <= fuzzMaxBody {
			data = slices.Concat(head, bytes.Repeat(mid, int(n)), tail)
		}
		for _, ep := range endpoints {
			b, err := ParseBody(ep, data)
			b2, err2 := ParseBody(ep, data)
			if !reflect.DeepEqual(b, b2) || fuzzErrString(err) != fuzzErrString(err2) {
				t.Fatalf("%s: not deterministic: %+v %v, then %+v %v", ep, b, err, b2, err2)
			}
			if err != nil {
				var re *RequestError
				switch {
				case !errors.As(err, &re):
					t.Fatalf("%s: error %v is not a *RequestError", ep, err)
				case re.Status != 400 || re.Code == "" || re.Msg == "":
					t.Fatalf("%s: refusal %+v: want status 400 with a code and a message", ep, re)
				case len(re.Msg) > fuzzMaxErrMsg:
					t.Fatalf("%s: a %d-byte message for a %d-byte body (bound %d): %.300q...", ep, len(re.Msg), len(data), fuzzMaxErrMsg, re.Msg)
				case !slices.Contains(bodyFields, re.Param):
					t.Fatalf("%s: refusal names %q, which is not a body field", ep, re.Param)
				}
				if !reflect.ValueOf(b).IsZero() {
					t.Fatalf("%s: a refusal with a body %+v", ep, b)
				}
				continue
			}
			// A decoded string is no longer than the body, but for invalid
			// UTF-8: each bad byte becomes U+FFFD, 3 bytes.
			maxDecoded := 3 * len(data)
			var obj map[string]json.RawMessage
			if json.Unmarshal(data, &obj) != nil || obj == nil {
				t.Fatalf("%s: accepted %q, which is not a JSON object", ep, data)
			}
			switch {
			case b.Model == "" || len(b.Model) > maxDecoded:
				t.Fatalf("%s: model %.100q of %d bytes from a %d-byte body", ep, b.Model, len(b.Model), len(data))
			case b.MaxTokens < 0:
				t.Fatalf("%s: max tokens %d", ep, b.MaxTokens)
			case b.PromptTokens < 1 || b.PromptTokens > max(1, len(data)/4):
				t.Fatalf("%s: prompt estimate %d tokens from a %d-byte body", ep, b.PromptTokens, len(data))
			case len(b.User) > maxDecoded || len(b.PromptCacheKey) > maxDecoded:
				t.Fatalf("%s: user or cache key longer than the body: %+v", ep, b)
			}
			if field, _ := promptOf(ep, openAIBody{}); field != "" && !hasPromptField(obj, field) {
				t.Fatalf("%s: accepted %q without %q", ep, data, field)
			}
		}
	})
}

// hasPromptField reports whether obj holds field (matched as
// encoding/json matches keys, ignoring case) with a value other than
// null, "", [].
func hasPromptField(obj map[string]json.RawMessage, field string) bool {
	for k, v := range obj {
		if bytes.EqualFold([]byte(k), []byte(field)) && !isAbsent(v) {
			return true
		}
	}
	return false
}

func fuzzErrString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
