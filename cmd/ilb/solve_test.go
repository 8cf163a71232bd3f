package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/sim/stack"
)

const (
	demoConfig = "../../examples/demo/ilb.yaml"
	demoDemand = "../../examples/demo/demand.yaml"
)

func TestSolveCommand(t *testing.T) {
	out, _, err := runCmd(t, "solve", "--config", demoConfig, "--demand", demoDemand, "--policy", "optimizer")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"(policy optimizer)", "cost (ms-equivalent/s): total",
		"edge-eu / qwen2.5-7b-instruct",
		"excluded: residency: region us-east is not in the allowed regions of source edge-eu",
		"CLUSTER", "MARGINAL",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("solve output lacks %q:\n%s", want, out)
		}
	}
	// --json output is a valid --previous for the next tick, which then
	// reports the previous weights.
	js, _, err := runCmd(t, "solve", "--config", demoConfig, "--demand", demoDemand, "--policy", "optimizer", "--json")
	if err != nil {
		t.Fatal(err)
	}
	prev := filepath.Join(t.TempDir(), "prev.json")
	if err := os.WriteFile(prev, []byte(js), 0o600); err != nil {
		t.Fatal(err)
	}
	next, _, err := runCmd(t, "solve", "--config", demoConfig, "--demand", demoDemand, "--policy", "optimizer", "--previous", prev, "--source", "edge-us", "--model", "llama-3.1-8b-instruct")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(next, "deadband") || strings.Contains(next, "edge-eu") {
		t.Errorf("same demand with --previous should hold the deadband, for edge-us only:\n%s", next)
	}
	// Errors name the file and the row.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("demand:\n  - {source: edge-us, model: gpt-9}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCmd(t, "solve", "--config", demoConfig, "--demand", bad); err == nil || !strings.Contains(err.Error(), `demand[0].model: unknown model "gpt-9"`) {
		t.Errorf("bad demand: %v", err)
	}
	if _, _, err := runCmd(t, "solve", "--config", demoConfig, "--demand", demoDemand, "--policy", "magic"); err == nil || !strings.Contains(err.Error(), `unknown policy "magic"`) {
		t.Errorf("bad policy: %v", err)
	}
}

func TestWeightsCommand(t *testing.T) {
	c, err := config.Load(demoConfig)
	if err != nil {
		t.Fatal(err)
	}
	st, err := stack.Start(context.Background(), c, stack.Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = st.Stop() }()
	out, _, err := runCmd(t, "weights", "--admin", st.App.AdminAddr(), "--source", "edge-eu", "--explain")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"weights " + st.App.Controller.Current().Version(), "edge-eu / llama-3.1-8b-instruct", "eu-west-vllm", "excluded: residency"} {
		if !strings.Contains(out, want) {
			t.Errorf("weights output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "edge-us /") {
		t.Errorf("--source edge-eu printed edge-us:\n%s", out)
	}
}
