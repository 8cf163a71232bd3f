package openai

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// diffBodies are bodies on which ParseBody must answer exactly as the
// encoding/json implementation it replaced (parseBodyStd): every syntax
// error state of encoding/json's scanner, at the end of the text and
// before it; each wrong type of each field; duplicate keys; keys matched
// by case folding and escapes; string escapes and invalid UTF-8.
var diffBodies = []string{
	// Valid bodies.
	`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":5}`,
	` { "model" : "m" , "messages" : [ 1 ] , "stream" : false } `,
	"\t\r\n{\"model\":\"m\",\"prompt\":\"p\"}\n",
	`{"model":"m","prompt":["a","b"],"user":"u","max_completion_tokens":-1}`,
	`{"model":"m","input":"x","prompt_cache_key":"k","max_tokens":0,"max_completion_tokens":7}`,
	`{"model":"m","input":[[1,2],[3]],"max_tokens":9223372036854775807}`,
	`{"model":"m","input":[],"max_tokens":-9223372036854775808}`,
	`{"model":"m","messages":[],"prompt":null,"input":""}`,
	`{"model":"m","messages":[ ],"prompt":{},"input":"" }`,
	`{"model":"m","messages":null}`,
	`{"model":"m","unknown":{"deep":[1,{"x":[true,false,null,-0.5e-3]}]},"messages":[1]}`,
	`{"model":"m","stream":null,"max_tokens":null,"user":null,"prompt_cache_key":null,"messages":[1]}`,
	`{}`,
	`null`,
	`{"model":null}`,
	`{"model":""}`,
	// Duplicate keys: the last value wins, the first type error too.
	`{"model":"a","model":"b","prompt":"x"}`,
	`{"model":"a","MODEL":"b","Model":null,"prompt":"x"}`,
	`{"model":"m","stream":true,"stream":null,"messages":[1]}`,
	`{"model":"m","stream":"yes","stream":true,"messages":[1]}`,
	`{"model":"m","stream":true,"stream":"yes","messages":[1]}`,
	`{"model":"m","max_tokens":5,"max_tokens":null,"max_completion_tokens":null,"messages":[1]}`,
	`{"model":"m","user":"a","user":"b","user":null,"messages":[1]}`,
	`{"model":"m","messages":[1],"messages":[]}`,
	// Keys: case folding, escapes, Unicode folding (ſ is s, K is k).
	`{"MODEL":"m","Messages":[{}]}`,
	`{"mod\u0065l":"m","\u006d\u0065ssages":[1]}`,
	"{\"model\":\"m\",\"\u017ftream\":true,\"max_to\u212aens\":3,\"messages\":[1]}",
	`{"model":"m","\u017Ftream":"x","messages":[1]}`,
	"{\"model\":\"m\",\"user\xff\":\"u\",\"messages\":[1]}",
	`{"model\u0000":"m","model ":"n"}`,
	`{"` + strings.Repeat(`\u0041`, 21) + `":"m","model":"m","messages":[1]}`,
	// Strings: escapes, surrogates, invalid UTF-8.
	`{"model":"\u00e9\ud800","messages":[1]}`,
	`{"model":"\ud83d\ude00 \uD83D\uDE00","messages":[1]}`,
	`{"model":"\udc00\ud800x\ud800\u0041","messages":[1]}`,
	`{"model":"\"\\\/\b\f\n\r\t","messages":[1]}`,
	"{\"model\":\"\xff\xfe\xed\xa0\x80\xef\xbf\xbd\xc3\",\"messages\":[1],\"user\":\"\xe2\x82\"}",
	`{"model":"\u0000","messages":[1]}`,
	// Wrong types.
	`[]`, `"m"`, `1`, `-1.5e3`, `true`, `false`,
	`{"model":12345678901234567890,"messages":[1]}`,
	`{"model":{"a":1},"messages":[1]}`,
	`{"model":["m"],"messages":[1]}`,
	`{"model":true,"messages":[1]}`,
	`{"model":"m","stream":"yes"}`, `{"model":"m","stream":1}`, `{"model":"m","stream":{}}`, `{"model":"m","stream":[]}`,
	`{"model":"m","max_tokens":"5"}`, `{"model":"m","max_tokens":true}`, `{"model":"m","max_tokens":1.5}`,
	`{"model":"m","max_tokens":1e2}`, `{"model":"m","max_tokens":99999999999999999999}`, `{"model":"m","max_tokens":-0}`,
	`{"model":"m","max_tokens":-9223372036854775809}`, `{"model":"m","max_completion_tokens":{"a":[]}}`,
	`{"model":"m","max_tokens":` + strings.Repeat("9", 5000) + `}`,
	`{"model":"m","user":5}`, `{"model":"m","user":true}`, `{"model":"m","user":{}}`, `{"model":"m","prompt_cache_key":[]}`,
	`{"model":"m","messages":[1],"max_tokens":-1}`,
	`{"model":"m","messages":[1],"max_completion_tokens":-3,"max_tokens":4}`,
	// Syntax errors, in every state of the scanner.
	``, `  `, "\u00a0", `{`, `[`, `"`, `{"model":"m"`, `{"model":"m",`, `{"model":"m",}`, `{"model" "m"}`,
	`{"model":}`, `{"model"`, `{"model":"m" "x":1}`, `{1:2}`, `{"a":1}}`, `{"a":1} x`, `{"a":1}  `, `{"a":1}]`,
	`[1,]`, `[1 2]`, `[1,2`, `[`, `[]]`, `{"a":[1}`, `{"a":{]}`, `{"a":"\x01"}`, "{\"a\":\"\x1f\"}",
	`{"a":"\q"}`, `{"a":"\u12g4"}`, `{"a":"\u12`, `{"a":"\u`, `{"a":"\`, `{"a":"abc`, `"abc`,
	`-`, `--1`, `-a`, `1.`, `1.e5`, `1.5e`, `1e+`, `1e+a`, `01`, `{"a":01}`, `[00]`, `-01`, `1.5.5`,
	`t`, `tr`, `tru`, `trux`, `f`, `fals`, `falsy`, `n`, `nul`, `nulx`, `nUll`,
	`{"model":tru}`, `{"model":-}`, `{"model":1.}`, `{"model":1e}`, `{"model":nul`,
	"\xff", "\xef\xbb\xbf{}", `'m'`, `{'model':'m'}`, `{"a":1,"b"}`, `{"a" : 1 , }`, `{,}`, `[,]`,
	"{\"model\":\"m\",\"messages\":[]}\x00",
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	`{"a":` + strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10001),
	`{"model":"m","messages":` + strings.Repeat("[", 9998) + strings.Repeat("]", 9998) + `}`,
	`{"model":"m","messages":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`,
}

// diffEndpoints are the endpoints ParseBody is compared on.
var diffEndpoints = []Endpoint{EndpointChat, EndpointCompletions, EndpointEmbeddings, EndpointOther}

// diffBody fails t when ParseBody and the encoding/json oracle answer
// data differently on any endpoint.
func diffBody(t *testing.T, data []byte) {
	t.Helper()
	for _, ep := range diffEndpoints {
		got, gotErr := ParseBody(ep, data)
		want, wantErr := parseBodyStd(ep, data)
		if !reflect.DeepEqual(got, want) || !sameRequestError(gotErr, wantErr) {
			t.Fatalf("%s %.200q:\n got  %+v, %v\n want %+v, %v (encoding/json)", ep, data, got, describeErr(gotErr), want, describeErr(wantErr))
		}
	}
}

func sameRequestError(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var ra, rb *RequestError
	return errors.As(a, &ra) && errors.As(b, &rb) && *ra == *rb
}

func describeErr(err error) string {
	var re *RequestError
	if errors.As(err, &re) {
		return fmt.Sprintf("%+v", *re)
	}
	return fmt.Sprint(err)
}

// TestParseBodyMatchesEncodingJSON: on every body of diffBodies, and each
// with its last byte cut (a body that ends early in every state),
// ParseBody answers as encoding/json did.
func TestParseBodyMatchesEncodingJSON(t *testing.T) {
	for _, s := range diffBodies {
		diffBody(t, []byte(s))
		for cut := len(s) - 1; cut >= 0 && cut >= len(s)-12; cut-- {
			diffBody(t, []byte(s[:cut]))
		}
	}
}

// TestParseBodyDecodes pins a few answers in plain words (the oracle
// could share a mistake with its port).
func TestParseBodyDecodes(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       Body
		err        string
	}{
		{
			"chat", `{"model":"m","stream":true,"max_tokens":7,"user":"u","messages":[{"content":"hello world"}]}`,
			Body{Model: "m", Stream: true, MaxTokens: 7, User: "u", PromptTokens: 27 / 4, PromptField: "messages"},
			"",
		},
		{"escaped model", `{"model":"caf\u00e9-\ud83d\ude00","messages":[1]}`, Body{Model: "café-😀", PromptTokens: 1, PromptField: "messages"}, ""},
		{"escaped exact key", `{"mod\u0065l":"m","messages":[1]}`, Body{Model: "m", PromptTokens: 1, PromptField: "messages"}, ""},
		{"case variant of a key ILB reads", "{\"MODEL\":\"m\",\"messages\":[1]}", Body{}, `400 ambiguous_key: key "MODEL" is a case variant of "model": an engine could read another value than the one ILB routes on; send each key once, spelled exactly`},
		{"folded key", "{\"model\":\"m\",\"\u017ftream\":true,\"messages\":[1]}", Body{}, `400 ambiguous_key: key "ſtream" is a case variant of "stream": an engine could read another value than the one ILB routes on; send each key once, spelled exactly`},
		{"duplicate key", `{"model":"llama","messages":[1],"model":"qwen"}`, Body{}, `400 ambiguous_key: key "model" appears more than once: an engine could read another value than the one ILB routes on; send each key once, spelled exactly`},
		{"duplicate key of another case", `{"max_tokens":32768,"model":"m","MAX_TOKENS":1,"messages":[1]}`, Body{}, `400 ambiguous_key: key "MAX_TOKENS" is a case variant of "max_tokens": an engine could read another value than the one ILB routes on; send each key once, spelled exactly`},
		{"a key ILB does not read may repeat", `{"model":"m","temperature":1,"temperature":0,"messages":[1]}`, Body{Model: "m", PromptTokens: 1, PromptField: "messages"}, ""},
		{"max_tokens and max_completion_tokens agree", `{"model":"m","max_tokens":9,"max_completion_tokens":9,"messages":[1]}`, Body{Model: "m", MaxTokens: 9, PromptTokens: 1, PromptField: "messages"}, ""},
		{"max_tokens and max_completion_tokens differ", `{"model":"m","max_completion_tokens":0,"max_tokens":32768,"messages":[1]}`, Body{}, `400 ambiguous_key: max_tokens is 32768 and max_completion_tokens is 0: engines choose between them differently; send one`},
		{"syntax", `{"model":"m",}`, Body{}, `400 invalid_json: the request body is not valid JSON: invalid character '}' looking for beginning of object key string (at byte 14)`},
		{"type", `{"model":"m","stream":"yes"}`, Body{}, `400 invalid_type: field "stream" is a JSON string: want a boolean`},
		{"huge number", `{"model":"m","max_tokens":1e15}`, Body{}, `400 invalid_type: field "max_tokens" is a JSON number 1e15: want an integer`},
		{"first type error", `{"model":"m","user":1,"stream":"x"}`, Body{}, `400 invalid_type: field "user" is a JSON number: want a string`},
		{"no prompt", `{"model":"m","messages":[]}`, Body{}, `400 missing_required_parameter: the request has no "messages": chat/completions needs it`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseBody(EndpointChat, []byte(tc.body))
			got.Prompt = nil // the prompt's raw JSON: checked by the replica tests
			msg := ""
			if err != nil {
				msg = err.Error()
			}
			if !reflect.DeepEqual(got, tc.want) || msg != tc.err {
				t.Errorf("ParseBody = %+v, %v; want %+v, %s", got, err, tc.want, tc.err)
			}
		})
	}
}

// FuzzBodyMatchesEncodingJSON: on any body (head + mid×n + tail, to
// reach tens of KiB), ParseBody answers exactly as the encoding/json
// implementation it replaced: the same Body, or the same *RequestError
// (status, code, param and message, syntax error offsets included).
//
//	go test -run '^$' -fuzz FuzzBodyMatchesEncodingJSON -fuzztime 5m ./extproc/
func FuzzBodyMatchesEncodingJSON(f *testing.F) {
	for _, s := range diffBodies {
		if len(s) < 4096 {
			f.Add([]byte(s), []byte(nil), []byte(nil), uint16(0))
		}
	}
	for _, s := range []struct {
		head, mid, tail string
		n               uint16
	}{
		{`{"model":"m","messages":[{"content":"`, "x", `"}]}`, 4096},
		{`{"model":"m","messages":[{"content":"`, `\u00e9\n\"`, `"}]}`, 500},
		{`{"model":"m","messages":[`, `{"role":"user","content":"hi"},`, `{}]}`, 500},
		{`{"model":"`, `m`, `","prompt":"p"}`, 300},
		{`{"model":"m","input":[`, `[1,2],`, `[]],"user":"u"}`, 1000},
		{`{"model":"m","prompt":"p","user":"`, `é`, `"}`, 200},
		{`{"model":"m","messages":`, `[`, ``, 3000},
		{`{"model":"m","messages":[1],"max_tokens":`, `9`, `}`, 40},
		{`{"model":"m","messages":["`, "\xff\x01", `"]}`, 10},
	} {
		f.Add([]byte(s.head), []byte(s.mid), []byte(s.tail), s.n)
	}
	f.Fuzz(func(t *testing.T, head, mid, tail []byte, n uint16) {
		data := head
		if len(mid)*int(n) <= fuzzMaxBody {
			data = slices.Concat(head, bytes.Repeat(mid, int(n)), tail)
		}
		diffBody(t, data)
	})
}

// TestParseBodyEscapesAtEveryOffset: a string with one special sequence
// (each escape, an escaped backslash before a quote or ']', a control
// byte, a bad escape, a cut \u, invalid UTF-8, the end of the text) at
// every offset from its start through three 64-byte windows reads as
// encoding/json reads it: the scanner's windows, their edges and its
// false flags are invisible.
func TestParseBodyEscapesAtEveryOffset(t *testing.T) {
	specials := []string{
		`\n`, `\"`, `\\`, `\/`, `\b`, `\f`, `\r`, `\t`, `\u00e9`, `\uD83D\uDE00`, `\\"`, `\\]`, `\\\\]`, `\\\"`,
		"\x01", "\x1f", `\x`, `\u12`, `\u12G4`, "\xff", "\xc3", `"`, `\`, "]",
	}
	for _, sp := range specials {
		for off := range 200 {
			text := strings.Repeat("a", off) + sp + strings.Repeat("b", 40)
			body := `{"model":"m","messages":[{"content":"` + text + `"}]}`
			diffBody(t, []byte(body))
			diffBody(t, []byte(body[:len(`{"model":"m","messages":[{"content":"`)+off+len(sp)])) // the text ends there
		}
	}
}
