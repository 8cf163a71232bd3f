package main

import (
	"context"
	"maps"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/admin"
	"github.com/ilbproject/ilb/capacity"
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/weights"
)

// whyAdmin serves the admin API of a real controller that published
// three versions into a History: full capacity, us-east-vllm at half,
// then us-east-vllm without capacity. With noHistory, the History is not
// served.
func whyAdmin(t *testing.T, noHistory bool) (string, *controller.Controller) {
	t.Helper()
	c, err := config.Load("../../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	hist := controller.NewHistory(0, nil)
	state := weights.StaticState(c)
	ctl, err := controller.New(controller.Options{
		Config: c, Policy: weights.Proportional{}, Sinks: []controller.Sink{hist},
		State: func() (map[string]weights.ClusterState, time.Time) { return state, time.Now() },
	})
	if err != nil {
		t.Fatal(err)
	}
	full := state["us-east-vllm"]
	for _, us := range []weights.ClusterState{full, {Ready: 1, Capacity: full.Capacity / float64(full.Ready)}, {Unhealthy: full.Ready}} {
		state = maps.Clone(state)
		state["us-east-vllm"] = us
		if err := ctl.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	est, err := capacity.New(capacity.Settings{SaturationQueue: 0.5, SaturationKV: 0.95, TTFTTarget: 2 * time.Second, TTFTQuantile: 0.99},
		[]capacity.Cluster{{Name: "us-east-vllm", Prior: 12000, PromptCost: 1, OutputCost: 4}, {Name: "eu-west-vllm", Prior: 12000, PromptCost: 1, OutputCost: 4}})
	if err != nil {
		t.Fatal(err)
	}
	o := admin.Options{Config: c, Weights: ctl, History: hist, Capacity: est}
	if noHistory {
		o.History = nil
	}
	srv := httptest.NewServer(admin.Handler(o))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), ctl
}

func TestWhyCommand(t *testing.T) {
	addr, ctl := whyAdmin(t, false)
	cur := ctl.Current().Version()
	tests := []struct {
		name string
		args []string
		want []string
		not  []string
	}{
		{
			"current explanation then history",
			[]string{"--source", "edge-us", "--model", "qwen2.5-7b-instruct"},
			[]string{
				"weights " + cur + " (policy proportional",
				"edge-us / qwen2.5-7b-instruct",
				"CLUSTER", "REGION", "WEIGHT", "PREV", "WHY", // the --explain table
				"history of edge-us / qwen2.5-7b-instruct, newest first (3 versions):",
				"version " + cur + " (policy proportional), after ",
				"us-east-vllm",
				"->   0.00%",
				"the oldest version kept: us-east-vllm ",
				"capacity per replica of these clusters, learned from their engines",
				"us-east-vllm  12000    12000  12000       0        0%          prior  0         unknown    no evidence yet: the configured profile",
			},
			nil,
		},
		{
			"a model named by its alias",
			[]string{"--source", "edge-us", "--model", "qwen-7b", "--versions", "1"},
			[]string{`model "qwen-7b" is an alias of qwen2.5-7b-instruct`, "edge-us / qwen2.5-7b-instruct"},
			nil,
		},
		{
			"fewer versions",
			[]string{"--source", "edge-us", "--model", "qwen2.5-7b-instruct", "--versions", "1"},
			[]string{"newest first (1 versions)", "version " + cur},
			[]string{"the oldest version kept"},
		},
		{
			"a cell the capacity change does not touch",
			[]string{"--source", "edge-eu", "--model", "qwen2.5-7b-instruct"},
			[]string{"history of edge-eu / qwen2.5-7b-instruct", "this cell did not change (another cell did)", "the oldest version kept: eu-west-vllm 80.00%, eu-west-tgi 20.00%"},
			nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := runCmd(t, append([]string{"why", "--admin", addr}, tt.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range tt.not {
				if strings.Contains(out, w) {
					t.Errorf("output has %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestWhyErrors(t *testing.T) {
	addr, _ := whyAdmin(t, false)
	bare, _ := whyAdmin(t, true)
	dead := deadAddr(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{
			"unknown source",
			[]string{"--admin", addr, "--source", "edge-mars", "--model", "qwen2.5-7b-instruct"},
			`unknown source "edge-mars"; known sources: edge-eu, edge-us`,
		},
		{
			"unknown model",
			[]string{"--admin", addr, "--source", "edge-us", "--model", "gpt-9"},
			`source "edge-us" has no model "gpt-9"; its models: llama-3.1-8b-instruct, qwen2.5-7b-instruct`,
		},
		{
			"admin unreachable",
			[]string{"--admin", dead, "--source", "edge-us", "--model", "m"},
			"admin API at " + dead + " is unreachable",
		},
		{
			"no history kept",
			[]string{"--admin", bare, "--source", "edge-us", "--model", "qwen2.5-7b-instruct"},
			"weights history: this process keeps no weights history",
		},
		{"source and model required", []string{"--admin", addr, "--source", "edge-us"}, "want --source S --model M"},
		{"bad versions", []string{"--admin", addr, "--source", "edge-us", "--model", "m", "--versions", "0"}, "--versions 0 is not in 1..1000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runCmd(t, append([]string{"why"}, tt.args...)...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v; want %q", err, tt.want)
			}
		})
	}
}
