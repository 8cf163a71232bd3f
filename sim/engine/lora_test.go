package engine

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"
)

const testAdapter = "sim-lora"

// loraBackend is a zero-delay FixedBackend that reports the LoRALoad the
// test sets.
type loraBackend struct {
	*FixedBackend
	mu   sync.Mutex
	load LoRALoad
}

func newLoRABackend(maxLoras int) *loraBackend {
	return &loraBackend{FixedBackend: NewFixedBackend(FixedTiming{}), load: LoRALoad{MaxLoras: maxLoras}}
}

func (b *loraBackend) set(l LoRALoad) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.load = l
}

func (b *loraBackend) LoRALoad() LoRALoad {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.load
}

// testClock is a settable Options.Now.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// TestLoRARouting: a request for an adapter reaches the backend as a LoRA
// request on the primary model, whose series count it; the adapters are
// listed as models with their parent.
func TestLoRARouting(t *testing.T) {
	ob := observe(NewFixedBackend(FixedTiming{}))
	opts := testOptions(ob)
	opts.Adapters = []string{testAdapter, "other-lora"}
	base := startServer(t, opts)
	chat := func(model string) string {
		return `{"model":"` + model + `","messages":[{"role":"user","content":"abcdefgh"}],"max_tokens":2}`
	}
	tests := []struct {
		name, path, body string
		status           int
		want             *GenRequest // what the backend gets; nil: nothing
	}{
		{"adapter", "/v1/chat/completions", chat(testAdapter), http.StatusOK, &GenRequest{Model: testAdapter, Adapter: testAdapter, PromptTokens: 2, MaxTokens: 2}},
		{"base model", "/v1/chat/completions", chat(testModel2), http.StatusOK, &GenRequest{Model: testModel2, PromptTokens: 2, MaxTokens: 2}},
		{"adapter, completions", "/v1/completions", `{"model":"other-lora","prompt":"abcd","max_tokens":1}`, http.StatusOK, &GenRequest{Model: "other-lora", Adapter: "other-lora", PromptTokens: 1, MaxTokens: 1}},
		{"unknown model", "/v1/chat/completions", chat("no-such-lora"), http.StatusNotFound, nil},
		{"adapter, embeddings", "/v1/embeddings", `{"model":"sim-lora","input":"abcd"}`, http.StatusOK, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := call(t, http.MethodPost, base+tc.path, tc.body)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, body, tc.status)
			}
			if tc.status == http.StatusOK {
				var c completionResp
				mustUnmarshal(t, body, &c)
				if model := chatModel(tc.body); c.Model != model {
					t.Errorf("response model %q, want %q", c.Model, model)
				}
			}
			if tc.want == nil {
				return
			}
			select {
			case got := <-ob.generated:
				if got != *tc.want {
					t.Errorf("backend got %+v, want %+v", got, *tc.want)
				}
			default:
				t.Error("the backend got no request")
			}
		})
	}
	ms := scrape(t, base)
	// Adapter requests count on the primary model: 2 (chat) + 1
	// (completions) + 1 (embeddings) prompt tokens.
	if got, ok := sample(ms, metricPromptTokens, map[string]string{"model_name": testModel}); !ok || got != 4 {
		t.Errorf("%s{model_name=%s} = %v (present %v), want 4", metricPromptTokens, testModel, got, ok)
	}
	for name, ss := range ms {
		for _, s := range ss {
			if m := s.labels["model_name"]; m == testAdapter || m == "other-lora" {
				t.Errorf("%s%v: labelled with an adapter", name, s.labels)
			}
		}
	}
	if _, ok := ms[metricLoRAInfo]; ok {
		t.Errorf("%s exported for a FixedBackend, which does not report adapters", metricLoRAInfo)
	}

	t.Run("models", func(t *testing.T) {
		_, body := call(t, http.MethodGet, base+"/v1/models", "")
		var l modelList
		mustUnmarshal(t, body, &l)
		card := func(id, parent string) modelCard {
			return modelCard{ID: id, Object: "model", Created: testNow().Unix(), OwnedBy: "ilb-sim", Parent: parent}
		}
		want := []modelCard{card(testModel, ""), card(testModel2, ""), card(testAdapter, testModel), card("other-lora", testModel)}
		if !slices.Equal(l.Data, want) {
			t.Errorf("models %+v, want %+v", l.Data, want)
		}
		_, body = call(t, http.MethodGet, base+"/v1/models/"+testAdapter, "")
		var c modelCard
		mustUnmarshal(t, body, &c)
		if c != card(testAdapter, testModel) {
			t.Errorf("adapter card %+v, want %+v", c, card(testAdapter, testModel))
		}
	})
}

// chatModel is the "model" of a request body of TestLoRARouting.
func chatModel(body string) string {
	var v struct{ Model string }
	_ = json.Unmarshal([]byte(body), &v)
	return v.Model
}

// TestLoRARequestsInfo: vllm:lora_requests_info as vLLM exports it: the
// current label combination stamped with the scrape's Unix time, past
// combinations kept with their last time, at most loraHistory of them.
func TestLoRARequestsInfo(t *testing.T) {
	b := newLoRABackend(2)
	clock := &testClock{now: time.Unix(1700000000, 0)}
	opts := testOptions(b)
	opts.Adapters, opts.Now = []string{"a", "b", "c"}, clock.Now
	base := startServer(t, opts)
	type series struct {
		running, waiting string
		at               float64
	}
	info := func(ms map[string][]promSample) []series {
		var out []series
		for _, s := range ms[metricLoRAInfo] {
			if s.labels["max_lora"] != "2" || s.labels["cluster"] != testCluster || len(s.labels) != 4 {
				t.Errorf("%s labels %v, want max_lora 2, cluster, running and waiting adapters", metricLoRAInfo, s.labels)
			}
			out = append(out, series{s.labels["running_lora_adapters"], s.labels["waiting_lora_adapters"], s.value})
		}
		slices.SortFunc(out, func(x, y series) int { return cmp.Compare(x.at, y.at) })
		return out
	}
	steps := []struct {
		name     string
		at       float64 // Unix seconds of the scrape
		adapters []AdapterLoad
		want     []series // oldest first
	}{
		{"idle", 1700000000, nil, []series{{"", "", 1700000000}}},
		{
			"running and waiting adapters", 1700000005.5,
			[]AdapterLoad{{"a", 2, 0}, {"b", 0, 1}},
			[]series{{"", "", 1700000000}, {"a", "b", 1700000005.5}},
		},
		{
			"in both lists, in the backend's order", 1700000010,
			[]AdapterLoad{{"c", 1, 1}, {"a", 1, 0}},
			[]series{{"", "", 1700000000}, {"a", "b", 1700000005.5}, {"c,a", "c", 1700000010}},
		},
		{
			"a combination seen again is stamped again", 1700000020,
			[]AdapterLoad{{"a", 2, 0}, {"b", 0, 1}},
			[]series{{"", "", 1700000000}, {"c,a", "c", 1700000010}, {"a", "b", 1700000020}},
		},
	}
	for _, s := range steps {
		clock.set(time.Unix(0, int64(s.at*1e9)))
		b.set(LoRALoad{MaxLoras: 2, Adapters: s.adapters})
		if got := info(scrape(t, base)); !slices.Equal(got, s.want) {
			t.Errorf("%s: series %+v, want %+v", s.name, got, s.want)
		}
	}

	t.Run("history is bounded", func(t *testing.T) {
		start := 1700001000.0
		for i := range loraHistory + 6 {
			clock.set(time.Unix(int64(start)+int64(i), 0))
			b.set(LoRALoad{MaxLoras: 2, Adapters: []AdapterLoad{{fmt.Sprintf("x%d", i), 1, 0}}})
			scrape(t, base)
		}
		got := info(scrape(t, base)) // the last combination again
		if len(got) != loraHistory {
			t.Fatalf("%d series, want %d", len(got), loraHistory)
		}
		if first, last := got[0], got[len(got)-1]; first.running != "x6" || last.running != fmt.Sprintf("x%d", loraHistory+5) {
			t.Errorf("oldest %+v, newest %+v: want x6 kept, the newest last", first, last)
		}
	})
}

// TestLoRARequestsInfoAbsent: the gauge is only the vllm kind's, and needs
// adapters and a backend that reports them.
func TestLoRARequestsInfoAbsent(t *testing.T) {
	tests := []struct {
		name     string
		kind     string
		adapters []string
		backend  Backend
	}{
		{"no adapters", "vllm", nil, newLoRABackend(2)},
		{"a backend that does not report adapters", "vllm", []string{"a"}, NewFixedBackend(FixedTiming{})},
		{"sglang", "sglang", []string{"a"}, newLoRABackend(2)},
		{"trtllm", "trtllm", []string{"a"}, newLoRABackend(2)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			opts := testOptions(tc.backend)
			opts.Kind, opts.Adapters = tc.kind, tc.adapters
			ms := scrape(t, startServer(t, opts))
			if _, ok := ms[metricLoRAInfo]; ok {
				t.Errorf("%s exported", metricLoRAInfo)
			}
		})
	}
}
