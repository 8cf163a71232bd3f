package demand_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ilbproject/ilb/demand"
)

// logLines collects a logger's records as JSON objects.
type logLines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logLines) logger() *slog.Logger { return slog.New(slog.NewJSONHandler(l, nil)) }

// with returns the records whose message is msg.
func (l *logLines) with(t *testing.T, msg string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// TestRefusalLogIsRateLimited: a reporter sending bad reports every
// second gets one log line a minute per reporter, saying how many were
// held back; every refused entry is still counted, and Status keeps the
// last few refusals.
func TestRefusalLogIsRateLimited(t *testing.T) {
	var logs logLines
	clk := newClock(time.Unix(5000, 0))
	agg := demand.NewAggregatorWith(demand.AggregatorOptions{Config: demoConfig(t), Logger: logs.logger(), Start: t0, Now: clk.now})
	bad := loc("edge-us", "llama-3.1-8b-instruct", "standard", 1, -1, 0, 0)
	for range 90 { // 90 s of one bad report a second from one reporter, and one from another
		clk.add(time.Second)
		for _, id := range []string{"a", "b"} {
			if err := agg.Report(demandReport(demand.ReporterNode(id), time.Second, bad, bad)); err != nil {
				t.Fatal(err)
			}
		}
	}
	lines := logs.with(t, "demand report: entries refused")
	if len(lines) != 4 {
		t.Fatalf("%d log lines; want 4 (two reporters, at 0 and 60 s): %v", len(lines), lines)
	}
	if held := lines[2]["reports_held_back"]; held != float64(59) {
		t.Errorf("second line of a: %v held back; want 59", held)
	}
	if r := lines[0]["reasons"]; !strings.Contains(fmt.Sprint(r), "token cost -1: want a finite number >= 0") {
		t.Errorf("reasons %v", r)
	}
	st := agg.Status()
	if st.Dropped != 360 || len(st.Refusals) != 8 || st.Refusals[7].Entries != 2 {
		t.Errorf("dropped %d, %d refusals kept (%+v); want 360 entries dropped, the last 8 reports kept", st.Dropped, len(st.Refusals), st.Refusals)
	}
}
