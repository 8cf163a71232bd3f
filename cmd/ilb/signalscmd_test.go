package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/capacity"
	"github.com/ilbproject/ilb/signals"
)

func TestPrintSignalsBlind(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		blind *signals.Blind
		want  []string
		not   []string
	}{
		{"seeing", nil, []string{"engine signals at 2026-12-01T11:59:59Z"}, []string{"BLIND"}},
		{"blind", &signals.Blind{Reason: "the signals loop woke 2.3s late (interval 1s)", Since: now.Add(-90 * time.Second)}, []string{
			"BLIND since 2026-12-01T11:58:30Z (1m30s): the signals loop woke 2.3s late (interval 1s)",
			"replicas failing silently keep their last known state; the controller keeps its last weights",
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			printSignals(&b, signalsView{Signals: &signals.Snapshot{At: now.Add(-time.Second), Blind: tt.blind}}, "", now)
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, b.String())
				}
			}
			for _, w := range tt.not {
				if strings.Contains(b.String(), w) {
					t.Errorf("output has %q:\n%s", w, b.String())
				}
			}
		})
	}
}

// TestPrintSignalsDiscoveryStale: a cluster whose discovery fails says
// so, for how long, that its replicas are held, and why; a replica's zone
// is shown.
func TestPrintSignalsDiscoveryStale(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	v := signalsView{Signals: &signals.Snapshot{
		At: now,
		Clusters: map[string]signals.Cluster{"us-east-vllm": {
			Name: "us-east-vllm", Ready: 1,
			DiscoveryError: "API server us-east: EndpointSlices of Service inference/vllm: the API server does not answer", DiscoveryErrorSince: now.Add(-42 * time.Second),
		}},
		Replicas: []signals.Replica{{Cluster: "us-east-vllm", Address: "10.0.0.1:8000", State: signals.StateReady, Reason: "discovered", Zone: "us-east-1a", Ramp: 1}},
	}}
	var b bytes.Buffer
	printSignals(&b, v, "", now)
	for _, w := range []string{
		"DISCOVERY STALE for 42s, replicas held: API server us-east: EndpointSlices of Service inference/vllm: the API server does not answer",
		"discovered; zone us-east-1a",
	} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, b.String())
		}
	}
}

func TestPrintSignalsCapacity(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	v := signalsView{Signals: &signals.Snapshot{At: now}, Capacity: []capacity.Estimate{
		{Cluster: "us-east-vllm", PerReplica: 4000, Prior: 12000, Saturation: 4100, Backlog: 1600, Confidence: 0.99, From: capacity.FromOverload, Measured: 4050, SlowShare: 0.5, Evidence: "queued for 12s"},
		{Cluster: "eu-west-tgi", PerReplica: 6000, Prior: 6000, Saturation: 6000, From: capacity.FromPrior, SlowShare: -1, Evidence: "no evidence yet: the configured profile"},
	}}
	var b bytes.Buffer
	printSignals(&b, v, "", now)
	for _, w := range []string{
		"CLUSTER       PLANNED  PRIOR  SATURATION  BACKLOG  CONFIDENCE  FROM      MEASURED  SLOW TTFT  EVIDENCE",
		"us-east-vllm  4000     12000  4100        1600     99%         overload  4050      50.0%      queued for 12s",
		"eu-west-tgi   6000     6000   6000        0        0%          prior     0         unknown    no evidence yet: the configured profile",
	} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, b.String())
		}
	}
}

// TestSignalsUnknownCluster: --cluster naming a cluster the signals do
// not know is an error listing the known ones, not an empty table.
func TestSignalsUnknownCluster(t *testing.T) {
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"signals":{"at":"2026-01-01T00:00:00Z","clusters":{"us-east-vllm":{},"eu-west-tgi":{}}}}`))
	}))
	defer admin.Close()
	addr := strings.TrimPrefix(admin.URL, "http://")
	if _, _, err := runCmd(t, "signals", "--admin", addr, "--cluster", "nosuch"); err == nil ||
		!strings.Contains(err.Error(), `unknown engine cluster "nosuch"; known clusters: eu-west-tgi, us-east-vllm`) {
		t.Errorf("err %v; want the unknown cluster named, with the known ones", err)
	}
	if out, _, err := runCmd(t, "signals", "--admin", addr, "--cluster", "eu-west-tgi"); err != nil || !strings.Contains(out, "eu-west-tgi") {
		t.Errorf("a known cluster: %v\n%s", err, out)
	}
}
