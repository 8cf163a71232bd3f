package test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/picker"
)

// TestLoRAAdapterStaysOnItsReplica: through envoysim and ILB, with vLLM-
// like engine models serving a LoRA adapter (4 slots each): while a long
// request of the adapter runs on one replica of edge-eu's cluster, the
// engine reports it in vllm:lora_requests_info, ILB's signals read it, and
// every further request of the adapter goes to that replica (tier
// loaded), none to the other while it has headroom; the engine answers
// each as the adapter. A request for the base model is routed as before.
func TestLoRAAdapterStaysOnItsReplica(t *testing.T) {
	s := startWorld(t, nil, func(c *config.Config) {
		for i := range c.Models {
			if c.Models[i].Name == "llama-3.1-8b-instruct" {
				c.Models[i].Adapters = []config.Adapter{{Name: "sql-lora", Clusters: []string{"us-east-vllm", "eu-west-vllm"}}}
			}
		}
		for i := range c.Clusters {
			if c.Clusters[i].Name == "eu-west-vllm" {
				c.Clusters[i].ReplicaPicking.Enabled = true
			}
		}
	})
	eu, _ := s.Envoy("edge-eu")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long := make(chan error, 1)
	go func() {
		body := `{"model":"sql-lora","stream":true,"messages":[{"role":"user","content":"a long answer"}],"max_tokens":4096}`
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, eu.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		long <- err
	}()
	var holder string
	waitUntil(t, "eu-west-vllm's engine reports sql-lora running", time.Minute, func() bool {
		for _, r := range s.App.Signals.Snapshot().Endpoints("eu-west-vllm") {
			if l := r.Metrics.LoRA; l != nil && slices.Contains(l.Running, "sql-lora") {
				holder = r.Address
				return true
			}
		}
		return false
	})
	for i := range 12 {
		resp, body := chat(t, eu.URL, "sql-lora", nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"model":"sql-lora"`) {
			t.Fatalf("request %d: %d %s: want the adapter's answer", i, resp.StatusCode, body)
		}
		rec, ok := s.App.ExtProc.Decisions().Get(resp.Header.Get("x-request-id"))
		if !ok || rec.Replica == nil {
			t.Fatalf("request %d: no replica decision (%+v)", i, rec)
		}
		if rec.Adapter != "sql-lora" || rec.Model != "llama-3.1-8b-instruct" || rec.Chosen != "eu-west-vllm" {
			t.Errorf("request %d: record adapter %q model %q cluster %s", i, rec.Adapter, rec.Model, rec.Chosen)
		}
		if rec.Replica.Chosen != holder || rec.Replica.Terms.Adapter != picker.AdapterLoaded {
			t.Errorf("request %d went to %s (tier %q), want %s, which runs sql-lora", i, rec.Replica.Chosen, rec.Replica.Terms.Adapter, holder)
		}
	}
	if resp, body := chat(t, eu.URL, "llama3-8b", nil); resp.StatusCode != http.StatusOK {
		t.Errorf("base model: %d %s", resp.StatusCode, body)
	}
	cancel()
	if err := <-long; err != nil && !errors.Is(err, context.Canceled) {
		t.Logf("the long request ended: %v", err)
	}
}
