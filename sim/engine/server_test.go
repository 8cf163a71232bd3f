package engine

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// wantText is the completion of n tokens.
func wantText(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(TokenText(i))
	}
	return b.String()
}

type completionResp struct {
	ID                string `json:"id"`
	Object            string `json:"object"`
	Created           int64  `json:"created"`
	Model             string `json:"model"`
	SystemFingerprint string `json:"system_fingerprint"`
	Choices           []struct {
		Index   int `json:"index"`
		Message *struct {
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"message"`
		Text         string `json:"text"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

func TestGenerateNonStream(t *testing.T) {
	base := startServer(t, testOptions(nil))
	tests := []struct {
		name, path, body string
		wantObject       string
		wantIDPrefix     string
		wantTexts        []string
		wantUsage        usage
	}{{
		name: "chat string content, max_tokens",
		path: "/v1/chat/completions",
		// 12 characters of content -> 3 prompt tokens.
		body:       `{"model":"sim-model","messages":[{"role":"system","content":"abcd"},{"role":"user","content":"efghijkl"}],"max_tokens":5,"user":"u1"}`,
		wantObject: "chat.completion", wantIDPrefix: "chatcmpl-",
		wantTexts: []string{wantText(5)}, wantUsage: usage{3, 5, 8},
	}, {
		name: "chat content parts, max_completion_tokens wins, second model",
		path: "/v1/chat/completions",
		// 9 characters -> 3 tokens; the parts' texts count, not the JSON.
		body:       `{"model":"sim-model-b","messages":[{"role":"user","content":[{"type":"text","text":"hello"},{"type":"text","text":"ßwor"}]}],"max_tokens":100,"max_completion_tokens":2}`,
		wantObject: "chat.completion", wantIDPrefix: "chatcmpl-",
		wantTexts: []string{wantText(2)}, wantUsage: usage{3, 2, 5},
	}, {
		name:       "chat default max_tokens 16, empty content counts 1 token",
		path:       "/v1/chat/completions",
		body:       `{"model":"sim-model","messages":[{"role":"user","content":""}]}`,
		wantObject: "chat.completion", wantIDPrefix: "chatcmpl-",
		wantTexts: []string{wantText(16)}, wantUsage: usage{1, 16, 17},
	}, {
		name:       "completion string prompt",
		path:       "/v1/completions",
		body:       `{"model":"sim-model","prompt":"Once upon a time","max_tokens":4,"temperature":0.7}`,
		wantObject: "text_completion", wantIDPrefix: "cmpl-",
		wantTexts: []string{wantText(4)}, wantUsage: usage{4, 4, 8},
	}, {
		name:       "completion array of prompts gives one choice each",
		path:       "/v1/completions",
		body:       `{"model":"sim-model","prompt":["a","abcdefghi"],"max_tokens":3}`,
		wantObject: "text_completion", wantIDPrefix: "cmpl-",
		wantTexts: []string{wantText(3), wantText(3)}, wantUsage: usage{1 + 3, 6, 10},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := call(t, http.MethodPost, base+tc.path, tc.body)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, want 200: %s", resp.StatusCode, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			if got := resp.Header.Get(HeaderReplica); got != testReplica {
				t.Errorf("%s = %q, want %q", HeaderReplica, got, testReplica)
			}
			var c completionResp
			mustUnmarshal(t, body, &c)
			if c.Object != tc.wantObject || !strings.HasPrefix(c.ID, tc.wantIDPrefix) || len(c.ID) <= len(tc.wantIDPrefix) {
				t.Errorf("object %q id %q, want %q %q…", c.Object, c.ID, tc.wantObject, tc.wantIDPrefix)
			}
			if c.Created != testNow().Unix() || c.SystemFingerprint != testReplica {
				t.Errorf("created %d fingerprint %q", c.Created, c.SystemFingerprint)
			}
			if len(c.Choices) != len(tc.wantTexts) {
				t.Fatalf("%d choices, want %d: %s", len(c.Choices), len(tc.wantTexts), body)
			}
			for i, ch := range c.Choices {
				got := ch.Text
				if tc.wantObject == "chat.completion" {
					if ch.Message == nil || ch.Message.Role != "assistant" {
						t.Fatalf("choice %d message %+v, want role assistant", i, ch.Message)
					}
					got = ch.Message.Content
				}
				if ch.Index != i || got != tc.wantTexts[i] || ch.FinishReason != "length" {
					t.Errorf("choice %d: index %d text %q finish %q, want %q length", i, ch.Index, got, ch.FinishReason, tc.wantTexts[i])
				}
			}
			if c.Usage == nil || *c.Usage != tc.wantUsage {
				t.Errorf("usage %+v, want %+v", c.Usage, tc.wantUsage)
			}
		})
	}
}

func TestEmbeddings(t *testing.T) {
	base := startServer(t, testOptions(nil))
	type embResp struct {
		Object string `json:"object"`
		Model  string `json:"model"`
		Data   []struct {
			Object    string `json:"object"`
			Index     int    `json:"index"`
			Embedding any    `json:"embedding"`
		} `json:"data"`
		Usage embeddingUsage `json:"usage"`
	}
	get := func(t *testing.T, body string) embResp {
		t.Helper()
		resp, b := call(t, http.MethodPost, base+"/v1/embeddings", body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		var r embResp
		mustUnmarshal(t, b, &r)
		return r
	}
	floats := func(t *testing.T, v any) []float32 {
		t.Helper()
		switch v := v.(type) {
		case []any:
			out := make([]float32, len(v))
			for i, f := range v {
				out[i] = float32(f.(float64))
			}
			return out
		case string:
			b, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				t.Fatalf("base64: %v", err)
			}
			out := make([]float32, len(b)/4)
			for i := range out {
				out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
			}
			return out
		}
		t.Fatalf("embedding of type %T", v)
		return nil
	}
	one := get(t, `{"model":"sim-model","input":"hello world!"}`)
	batch := get(t, `{"model":"sim-model","input":["other","hello world!"],"encoding_format":"float"}`)
	b64 := get(t, `{"model":"sim-model","input":["hello world!"],"encoding_format":"base64"}`)

	if one.Object != "list" || one.Model != testModel || len(one.Data) != 1 || one.Data[0].Object != "embedding" {
		t.Fatalf("response %+v", one)
	}
	if one.Usage != (embeddingUsage{PromptTokens: 3, TotalTokens: 3}) || batch.Usage.PromptTokens != 2+3 {
		t.Errorf("usage %+v and %+v, want 3 and 5 prompt tokens", one.Usage, batch.Usage)
	}
	v := floats(t, one.Data[0].Embedding)
	if len(v) != 8 {
		t.Fatalf("embedding of %d floats, want 8", len(v))
	}
	var norm float64
	for _, f := range v {
		norm += float64(f) * float64(f)
	}
	if math.Abs(norm-1) > 1e-3 {
		t.Errorf("|embedding|² = %v, want 1", norm)
	}
	if len(batch.Data) != 2 || batch.Data[1].Index != 1 {
		t.Fatalf("batch data %+v", batch.Data)
	}
	if !slices.Equal(floats(t, batch.Data[1].Embedding), v) || !slices.Equal(floats(t, b64.Data[0].Embedding), v) {
		t.Error("same input gave different embeddings (batch or base64)")
	}
	if slices.Equal(floats(t, batch.Data[0].Embedding), v) {
		t.Error("different inputs gave the same embedding")
	}
}

func TestModelsHealthAndHeaders(t *testing.T) {
	base := startServer(t, testOptions(nil))
	t.Run("models", func(t *testing.T) {
		resp, body := call(t, http.MethodGet, base+"/v1/models", "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		var l modelList
		mustUnmarshal(t, body, &l)
		want := modelList{Object: "list", Data: []modelCard{
			{ID: testModel, Object: "model", Created: testNow().Unix(), OwnedBy: "ilb-sim"},
			{ID: testModel2, Object: "model", Created: testNow().Unix(), OwnedBy: "ilb-sim"},
		}}
		if l.Object != want.Object || !slices.Equal(l.Data, want.Data) {
			t.Errorf("got %+v, want %+v", l, want)
		}
	})
	t.Run("one model's card", func(t *testing.T) {
		resp, body := call(t, http.MethodGet, base+"/v1/models/"+testModel2, "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		var c modelCard
		mustUnmarshal(t, body, &c)
		if want := (modelCard{ID: testModel2, Object: "model", Created: testNow().Unix(), OwnedBy: "ilb-sim"}); c != want {
			t.Errorf("got %+v, want %+v", c, want)
		}
	})
	t.Run("health", func(t *testing.T) {
		resp, body := call(t, http.MethodGet, base+"/health", "")
		if resp.StatusCode != http.StatusOK || len(body) != 0 {
			t.Errorf("status %d body %q, want 200 and empty", resp.StatusCode, body)
		}
	})
	for _, path := range []string{"/health", "/metrics", "/v1/models", "/nope"} {
		t.Run("headers "+path, func(t *testing.T) {
			resp, _ := call(t, http.MethodGet, base+path, "")
			if r, c := resp.Header.Get(HeaderReplica), resp.Header.Get(HeaderCluster); r != testReplica || c != testCluster {
				t.Errorf("replica %q cluster %q, want %q %q", r, c, testReplica, testCluster)
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Options)
		want   []string // substrings of the error; none: valid
	}{
		{"valid", func(*Options) {}, nil},
		{"all missing", func(o *Options) { *o = Options{} }, []string{"Name: required", "Cluster: required", "Models: at least one"}},
		{"bad name", func(o *Options) { o.Name = "a\nb" }, []string{`Name: "a\nb"`}},
		{"padded cluster", func(o *Options) { o.Cluster = " c" }, []string{`Cluster: " c"`}},
		{"empty and duplicate models", func(o *Options) { o.Models = []string{"m", "", "m"} }, []string{`Models[1]: ""`, `Models[2]: duplicate model "m"`}},
		{"negative shutdown", func(o *Options) { o.ShutdownTimeout = -1 }, []string{"ShutdownTimeout"}},
		{"adapters", func(o *Options) { o.Adapters = []string{"lora-a", "org/lora b", "ß-lora"} }, nil},
		{"adapters on a backend with LoRA", func(o *Options) { o.Adapters, o.Backend = []string{"a"}, newLoRABackend(1) }, nil},
		{"bad adapters", func(o *Options) {
			o.Adapters = []string{"", " a", "a,b", "a\x00", "x", "x", testModel}
		}, []string{
			`Adapters[0]: ""`, `Adapters[1]: " a"`, `Adapters[2]: "a,b"`, `Adapters[3]: "a\x00"`,
			`Adapters[5]: duplicate adapter "x"`, `Adapters[6]: "sim-model" is one of Models`,
		}},
		{"adapters on a backend with LoRA disabled", func(o *Options) {
			o.Adapters, o.Backend = []string{"a"}, newLoRABackend(0)
		}, []string{"Adapters: 1 served, but the backend has LoRA disabled"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := testOptions(nil)
			tc.mutate(&opts)
			s, err := New(opts)
			if tc.want == nil {
				if err != nil || s == nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("New error %v, want ErrInvalidOptions", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
