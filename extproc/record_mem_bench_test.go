package extproc_test

import (
	"encoding/json"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/extproc/extproctest"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/live"
)

// BenchmarkRecordRetained measures the memory a decision record keeps in
// the decision log: b.N chat requests of the demo world (a session, a
// 1 KiB prompt, replica picking live where a cluster has it on) through
// ext_proc over gRPC, each completed by its response headers, the log
// big enough for all of them; the heap growth after a GC, per record
// (retained-B/record; the goal: 400). -benchtime 100000x is the
// goal's scale.
//
//	go test -run '^$' -bench RecordRetained -benchtime 100000x ./extproc/
func BenchmarkRecordRetained(b *testing.B) {
	h := startWith(b, true, func(o *extproc.Options) {
		o.Config.ExtProc.DecisionLogSize = config.MaxDecisionLogSize // b.N is not known before b.Loop
		o.Config.ExtProc.DecisionLogBytes = 1 << 40
	})
	ls := &live.State{At: time.Unix(1700000000, 0), Clusters: map[string]live.Cluster{}}
	for _, c := range h.cfg.Clusters {
		var cl live.Cluster
		for _, ep := range c.Endpoints {
			cl.Replicas = append(cl.Replicas, live.Replica{Address: ep, Ramp: 1})
		}
		ls.Clusters[c.Name] = cl
	}
	h.srv.SetLive(ls)
	prompt := make([]byte, 1024)
	for i := range prompt {
		prompt[i] = 'a' + byte(i%26)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	i := 0
	for b.Loop() {
		i++
		body := fmt.Sprintf(`{"model":"llama3-8b","user":"user-%d","messages":[{"role":"user","content":"%d %s"}]}`, i%500, i, prompt)
		extproctest.Send(b, h.client, "edge-us",
			reqHeaders(false, ":method", "POST", ":path", "/v1/chat/completions", ":authority", "ilb", "x-request-id", fmt.Sprintf("req-%08d-0000-4000-8000-%012d", i, i)),
			reqBody(body),
			respHeaders(":status", "200", header.ServedCluster, "us-east-vllm", header.WeightsVersion, h.w.Version()))
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	n := h.srv.Decisions().Recent(1)
	if len(n) == 0 {
		b.Fatal("no record kept")
	}
	if testing.Verbose() {
		j, _ := json.Marshal(n[0])
		b.Logf("the last record: %s", j)
	}
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(b.N), "retained-B/record")
	b.ReportMetric(float64(h.srv.Decisions().Bytes())/float64(b.N), "estimated-B/record")
}
