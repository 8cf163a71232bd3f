//go:build !serving

package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/sim/loadgen"
	"github.com/ilbproject/ilb/sim/stack"
)

// TestDemoReportFailures: every failed request is reported with its
// status, x-ilb-reason and body, and fails the demo; the explained request
// is the latest one, whose record the decision log still holds.
func TestDemoReportFailures(t *testing.T) {
	st, ctx := startDemoWorld(t)
	d := &demo{Stack: st}
	results, err := loadgen.Run(ctx, loadgen.Options{
		Targets: d.targets(), Models: modelNames(st.Config), Requests: 20, Concurrency: 2, MaxTokens: 4, Seed: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	latest := results[len(results)-1].RequestID
	failed := loadgen.Result{Source: "edge-us", Status: 503, Reason: "no_capacity", Body: `{"error":{"code":"no_capacity"}}`, RequestID: "r-503"}
	var out bytes.Buffer
	err = d.report(ctx, &out, append([]loadgen.Result{failed, failed}, results...), time.Second)
	if err == nil {
		t.Error("the report of a failed request returned no error")
	}
	for _, want := range []string{
		`FAILED 2 × status 503, x-ilb-reason no_capacity, body "{\"error\":{\"code\":\"no_capacity\"}}" (e.g. request r-503)`,
		"Served by the cluster ILB chose: 20 of 20",
		"$ ilb explain --admin " + st.App.AdminAddr() + " " + latest,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// startDemoWorld runs the demo world (engines, ILB, envoysim per source)
// until the test ends; ctx ends with it.
func startDemoWorld(t *testing.T) (*stack.Stack, context.Context) {
	t.Helper()
	c, err := config.Load("../../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := stack.Start(ctx, c, stack.Options{Seed: 1})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = st.Wait()
	})
	return st, ctx
}
