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
	// Filters resolve aliases and name what they do not know.
	aliased, _, err := runCmd(t, "solve", "--config", demoConfig, "--demand", demoDemand, "--source", "edge-us", "--model", "qwen-7b")
	if err != nil || !strings.Contains(aliased, "edge-us / qwen2.5-7b-instruct") || strings.Contains(aliased, "llama") {
		t.Errorf("--model qwen-7b (an alias): %v\n%s", err, aliased)
	}
	for _, tt := range []struct{ flag, value, want string }{
		{"--source", "nosuch", `--source: unknown source "nosuch"; known sources: edge-us, edge-eu`},
		{"--model", "gpt-4o", `--model: unknown model "gpt-4o"; known models: llama-3.1-8b-instruct, llama3-8b`},
	} {
		if _, _, err := runCmd(t, "solve", "--config", demoConfig, "--demand", demoDemand, tt.flag, tt.value); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s %s: %v; want %q", tt.flag, tt.value, err, tt.want)
		}
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
	// Filters resolve aliases as clients name models, and name what they
	// do not know instead of printing an empty table.
	for _, tt := range []struct {
		name string
		args []string
		want string // in the output, or in the error
		ok   bool
	}{
		{"an alias", []string{"--model", "qwen-7b"}, "edge-us / qwen2.5-7b-instruct", true},
		{"an alias and a source", []string{"--source", "edge-eu", "--model", "llama3-8b"}, `model "llama3-8b" is an alias of llama-3.1-8b-instruct`, true},
		{"an unknown source", []string{"--source", "nosuch"}, `unknown source "nosuch"; known sources: edge-eu, edge-us`, false},
		{"an unknown model", []string{"--model", "gpt-4o"}, `unknown model "gpt-4o"; known models: llama-3.1-8b-instruct, qwen2.5-7b-instruct`, false},
		{"a known source, an unknown model", []string{"--source", "edge-us", "--model", "gpt-4o"}, `source "edge-us" has no model "gpt-4o"`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := runCmd(t, append([]string{"weights", "--admin", st.App.AdminAddr()}, tt.args...)...)
			checkOutcome(t, out, err, tt.want, tt.ok)
			if !tt.ok && out != "" {
				t.Errorf("printed %q before the error", out)
			}
		})
	}
}
