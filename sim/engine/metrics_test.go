package engine

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// TestMetricsInFlight holds two requests in a one-slot backend: one runs,
// one waits; after both finish the counters account for them.
func TestMetricsInFlight(t *testing.T) {
	g := newGate()
	ob := observe(NewFixedBackend(FixedTiming{MaxRunning: 1, KVCapacityTokens: 1000, Sleep: g.sleep}))
	base := startServer(t, testOptions(ob))
	model := map[string]string{"model_name": testModel, "cluster": testCluster}

	// 40 characters -> 10 prompt tokens each.
	body := `{"model":"sim-model","messages":[{"role":"user","content":"0123456789012345678901234567890123456789"}],"max_tokens":2}`
	r1 := post(t.Context(), base+"/v1/chat/completions", body)
	r2 := post(t.Context(), base+"/v1/chat/completions", body)
	ob.waitGenerated(t, 2) // both admitted or queued
	g.waitEntered(t, 1)    // the running one is in its prefill

	ms := scrape(t, base)
	for name, want := range map[string]float64{
		metricRunning: 1, metricWaiting: 1, metricKVUsage: 10.0 / 1000,
		metricSuccess: 0, metricGenTokens: 0, metricPromptTokens: 0,
	} {
		if got, ok := sample(ms, name, model); !ok || got != want {
			t.Errorf("in flight: %s = %v (present %v), want %v", name, got, ok, want)
		}
	}

	close(g.ch) // let everything run
	wantOK(t, r1)
	wantOK(t, r2)
	ms = scrape(t, base)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{metricRunning, model, 0},
		{metricWaiting, model, 0},
		{metricKVUsage, model, 0},
		{metricPromptTokens, model, 20},
		{metricGenTokens, model, 4},
		{metricSuccess, map[string]string{"model_name": testModel, "finished_reason": "length"}, 2},
		{metricSuccess, map[string]string{"model_name": testModel, "finished_reason": "abort"}, 0},
		{metricTTFT, model, 2}, // sample count
		{metricPromptTokens, map[string]string{"model_name": testModel2}, 0},
	} {
		if got, ok := sample(ms, c.name, c.labels); !ok || got != c.want {
			t.Errorf("after: %s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
}

// TestMetricsCounters checks the counters of each endpoint, by model.
func TestMetricsCounters(t *testing.T) {
	base := startServer(t, testOptions(nil))
	for _, r := range []struct{ path, body string }{
		{"/v1/completions", `{"model":"sim-model-b","prompt":["abcd","abcdefgh"],"max_tokens":3}`},
		{"/v1/completions", `{"model":"sim-model-b","prompt":"abcd","max_tokens":1,"stream":true}`},
		{"/v1/embeddings", `{"model":"sim-model-b","input":["abcd","abcd"]}`},
		{"/v1/chat/completions", `{"model":"nope","messages":[{"role":"user","content":"x"}]}`}, // 404: not counted
	} {
		resp, body := call(t, http.MethodPost, base+r.path, r.body)
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusNotFound {
			t.Fatalf("%s: status %d: %s", r.path, resp.StatusCode, body)
		}
	}
	ms := scrape(t, base)
	b := func(extra ...string) map[string]string {
		l := map[string]string{"model_name": testModel2}
		for i := 0; i+1 < len(extra); i += 2 {
			l[extra[i]] = extra[i+1]
		}
		return l
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{metricPromptTokens, b(), 1 + 2 + 1 + 1 + 1}, // completions 1+2+1, embeddings 1+1
		{metricGenTokens, b(), 3 + 3 + 1},
		{metricSuccess, b("finished_reason", "length"), 3},
		{metricSuccess, b("finished_reason", "stop"), 2},
		{metricTTFT, b(), 3},
		{metricGenTokens, map[string]string{"model_name": testModel}, 0},
	} {
		if got, ok := sample(ms, c.name, c.labels); !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if _, ok := sample(ms, metricSuccess, map[string]string{"model_name": "nope"}); ok {
		t.Error("a 404 model got a metric")
	}
}

// TestClientGoneReleasesSlot: a streaming client that disconnects frees
// its slot for the waiting request.
func TestClientGoneReleasesSlot(t *testing.T) {
	g := newGate()
	fb := NewFixedBackend(FixedTiming{MaxRunning: 1, Sleep: g.sleep})
	ob := observe(fb)
	base := startServer(t, testOptions(ob))

	ctxA, cancelA := context.WithCancel(t.Context())
	defer cancelA()
	respA := send(ctxA, t, http.MethodPost, base+"/v1/chat/completions",
		`{"model":"sim-model","messages":[{"role":"user","content":"a"}],"max_tokens":50,"stream":true}`)
	defer respA.Body.Close()
	ob.waitGenerated(t, 1)
	g.waitEntered(t, 1) // A holds the slot, sleeping in its prefill

	resB := post(t.Context(), base+"/v1/chat/completions",
		`{"model":"sim-model","messages":[{"role":"user","content":"b"}],"max_tokens":2}`)
	ob.waitGenerated(t, 1)
	if l := fb.Load(); l.Running != 1 || l.Waiting != 1 {
		t.Fatalf("before cancel: %+v, want 1 running 1 waiting", l)
	}

	cancelA()           // the client goes away
	g.waitEntered(t, 1) // B got the slot and started its prefill
	if l := fb.Load(); l.Running != 1 || l.Waiting != 0 {
		t.Errorf("after cancel: %+v, want 1 running 0 waiting", l)
	}
	close(g.ch)
	wantOK(t, resB)
}

// TestMetricDialects: a replica of each engine kind exports that engine's
// series (the names ILB's built-in mappings read), with its model label
// or none (TGI), and counts a request's tokens in them.
func TestMetricDialects(t *testing.T) {
	for _, tc := range []struct {
		kind          string
		series        []string // after one request (histograms by family name)
		promptTokens  string   // the counter of prompt tokens, "" for none
		modelLabelled bool
		absent        []string
	}{
		{"vllm", []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:generation_tokens_total", "vllm:time_to_first_token_seconds"}, "vllm:prompt_tokens_total", true, nil},
		{"sglang", []string{"sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:generation_tokens_total", "sglang:time_to_first_token_seconds"}, "sglang:prompt_tokens_total", true, []string{"vllm:num_requests_running"}},
		// TGI's token histograms (one request observed: count 1); their
		// _sum series are what ILB reads as token counters.
		{"tgi", []string{"tgi_batch_current_size", "tgi_queue_size", "tgi_request_generated_tokens", "tgi_request_input_length"}, "", false, []string{"vllm:kv_cache_usage_perc", "tgi_request_input_length_total"}},
		{"trtllm", []string{"trtllm_num_requests_running", "trtllm_num_requests_waiting", "trtllm_kv_cache_utilization", "trtllm_generation_tokens_total", "trtllm_time_to_first_token_seconds"}, "trtllm_prompt_tokens_total", true, nil},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			opts := testOptions(nil)
			opts.Kind = tc.kind
			base := startServer(t, opts)
			// 40 characters -> 10 prompt tokens.
			wantOK(t, post(t.Context(), base+"/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"0123456789012345678901234567890123456789"}],"max_tokens":2}`))
			ms := scrape(t, base)
			labels := map[string]string{"cluster": testCluster}
			if tc.modelLabelled {
				labels["model_name"] = testModel
			}
			for _, name := range tc.series {
				if _, ok := sample(ms, name, labels); !ok {
					t.Errorf("%s{%v} missing", name, labels)
				}
			}
			if got, ok := sample(ms, tc.promptTokens, labels); tc.promptTokens != "" && (!ok || got != 10) {
				t.Errorf("%s = %v (present %v), want 10 prompt tokens", tc.promptTokens, got, ok)
			}
			for _, name := range tc.absent {
				if _, ok := ms[name]; ok {
					t.Errorf("%s present: not %s's", name, tc.kind)
				}
			}
			if !tc.modelLabelled {
				for name, ss := range ms {
					for _, s := range ss {
						if _, ok := s.labels["model_name"]; ok {
							t.Errorf("%s has a model_name label: %s labels none", name, tc.kind)
						}
					}
				}
			}
		})
	}
	if _, err := New(Options{Name: "r", Cluster: "c", Models: []string{"m"}, Kind: "ollama"}); err == nil || !strings.Contains(err.Error(), `Kind: "ollama"`) {
		t.Errorf("unknown kind: %v", err)
	}
}
