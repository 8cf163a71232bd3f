package test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// checkGoSDK plays what a client of the official Go SDK does against the
// stack behind base (http://host:port/v1): a chat completion, a
// streamed one, the model list and a model, the errors ILB answers
// (unknown model, a prompt that cannot fit), 200 requests in a row on
// one keep-alive connection and 50 at once. No retries: every answer
// counts.
func checkGoSDK(t *testing.T, base string) {
	var dials atomic.Int64
	var d net.Dialer
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, addr)
		},
		MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1,
	}
	defer tr.CloseIdleConnections()
	client := openai.NewClient(option.WithBaseURL(base), option.WithAPIKey("unused"), option.WithMaxRetries(0),
		option.WithHTTPClient(&http.Client{Transport: tr, Timeout: 2 * time.Minute}))
	ctx := context.Background()
	chat := func(model, content string, maxTokens int64) openai.ChatCompletionNewParams {
		return openai.ChatCompletionNewParams{
			Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(content)},
			MaxTokens: openai.Int(maxTokens),
		}
	}
	t.Run("chat", func(t *testing.T) {
		c, err := client.Chat.Completions.New(ctx, chat("llama3-8b", "hi", 8))
		if err != nil || len(c.Choices) == 0 || c.Choices[0].Message.Content == "" {
			t.Fatalf("chat: %v %+v", err, c)
		}
	})
	t.Run("stream", func(t *testing.T) {
		s := client.Chat.Completions.NewStreaming(ctx, chat("qwen-7b", "hi", 8))
		var text strings.Builder
		chunks := 0
		for s.Next() {
			chunks++
			if ch := s.Current(); len(ch.Choices) > 0 {
				text.WriteString(ch.Choices[0].Delta.Content)
			}
		}
		if err := s.Err(); err != nil || chunks < 2 || text.Len() == 0 {
			t.Fatalf("stream: %v, %d chunks, %q", err, chunks, text.String())
		}
	})
	t.Run("models", func(t *testing.T) {
		page, err := client.Models.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range page.Data {
			ids = append(ids, m.ID)
		}
		if !slices.Contains(ids, "llama3-8b") || !slices.Contains(ids, "qwen2.5-7b-instruct") {
			t.Errorf("model list %v", ids)
		}
		m, err := client.Models.Get(ctx, "meta-llama/Llama-3.1-8B-Instruct")
		if err != nil || m.ID != "meta-llama/Llama-3.1-8B-Instruct" {
			t.Errorf("model: %v %+v", err, m)
		}
	})
	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			name, model, content string
			status               int
			code, param          string
		}{
			{"unknown model", "gpt-4o", "hi", 404, "model_not_found", "model"},
			{"a prompt that cannot fit", "llama3-8b", strings.Repeat("x", 1100_000), 400, "context_length_exceeded", "messages"},
		} {
			_, err := client.Chat.Completions.New(ctx, chat(tc.model, tc.content, 8))
			var e *openai.Error
			if !errors.As(err, &e) || e.StatusCode != tc.status || e.Code != tc.code || e.Param != tc.param || e.Message == "" {
				t.Errorf("%s: %v; want %d %s about %s", tc.name, err, tc.status, tc.code, tc.param)
			}
		}
	})
	t.Run("200 in a row on one connection", func(t *testing.T) {
		before := dials.Load()
		for i := range 200 {
			if _, err := client.Chat.Completions.New(ctx, chat("llama3-8b", "hi", 1)); err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
		}
		if n := dials.Load() - before; n > 1 {
			t.Errorf("%d connections for 200 requests; want one kept alive", n)
		}
	})
	t.Run("50 at once", func(t *testing.T) {
		c := openai.NewClient(option.WithBaseURL(base), option.WithAPIKey("unused"), option.WithMaxRetries(0))
		var wg sync.WaitGroup
		errs := make(chan error, 50)
		for range 50 {
			wg.Go(func() {
				if _, err := c.Chat.Completions.New(ctx, chat("qwen-7b", "hi", 4)); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

// checkNodeSDK runs testdata/sdk_check.mjs — the same checks with the
// official Node SDK (npm's openai 6) — against base. It needs node and
// npm, and npm's registry to install the SDK: without them it skips,
// unless ILB_REQUIRE_NODE_SDK=1 (.ci/run sets it).
func checkNodeSDK(t *testing.T, base string) {
	need := func(err error, what string) {
		if err == nil {
			return
		}
		if os.Getenv("ILB_REQUIRE_NODE_SDK") == "1" {
			t.Fatalf("%s: %v", what, err)
		}
		t.Skipf("%s: %v (ILB_REQUIRE_NODE_SDK=1 makes this a failure; .ci/run sets it)", what, err)
	}
	_, err := exec.LookPath("node")
	need(err, "node is missing (apt-get install npm)")
	_, err = exec.LookPath("npm")
	need(err, "npm is missing (apt-get install npm)")
	dir := t.TempDir()
	script, err := os.ReadFile("testdata/sdk_check.mjs")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sdk_check.mjs"), script, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	install := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--silent", "openai@6")
	install.Dir = dir
	out, err := install.CombinedOutput()
	need(err, "npm install openai@6: "+string(out))
	run := exec.CommandContext(ctx, "node", "sdk_check.mjs", base)
	run.Dir = dir
	out, err = run.CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if err != nil || lines[len(lines)-1] != "ok" {
		t.Fatalf("the Node SDK's checks: %v\n%s", err, out)
	}
}
