//go:build !serving

package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ilbproject/ilb/envoy"
)

// lockedBuffer is a bytes.Buffer safe for a writer and a reader.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestEnvoySimCommand runs `ilb envoysim --bootstrap FILE` against a
// running ILB, as a separate Envoy process would be: it takes its
// configuration over ADS and serves a chat request through ILB's ext_proc.
func TestEnvoySimCommand(t *testing.T) {
	st, ctx := startDemoWorld(t)
	b, err := envoy.Bootstrap(st.Config, "edge-us", envoy.BootstrapOptions{NodeID: "edge-us-separate", XDS: st.App.XDSAddr(), ExtProc: st.App.ExtProcAddr()})
	if err != nil {
		t.Fatal(err)
	}
	y, err := envoy.MarshalYAML(b)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "envoy-edge-us.yaml")
	if err := os.WriteFile(path, y, 0o600); err != nil {
		t.Fatal(err)
	}
	out := &lockedBuffer{}
	done := make(chan error, 1)
	rctx, stop := context.WithCancel(ctx)
	go func() {
		done <- runEnvoySim(rctx, []string{"--bootstrap", path, "--log-level", "warn"}, out, io.Discard)
	}()
	url := regexp.MustCompile(`listening on (http://[0-9.:]+)`)
	var base string
	waitFor(t, "envoysim configured", func() bool {
		m := url.FindStringSubmatch(out.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	}, done)
	resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"llama3-8b","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("chat through the separate envoysim: %d %s", resp.StatusCode, body)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("envoysim: %v", err)
	}
	if _, _, err := runCmd(t, "envoysim", "--bootstrap", filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("a missing bootstrap: %v", err)
	}
}

// waitFor polls cond until it holds, failing if the command ends first
// or a minute passes.
func waitFor(t *testing.T, what string, cond func() bool, done <-chan error) {
	t.Helper()
	deadline := time.After(time.Minute)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case err := <-done:
			t.Fatalf("%s: the command ended first: %v", what, err)
		case <-deadline:
			t.Fatalf("%s: not within a minute", what)
		case <-tick.C:
		}
	}
}
