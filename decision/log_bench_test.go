package decision

import (
	"context"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"
)

// BenchmarkLogWrite measures what the request path pays the decision log
// per request — add when ILB decides, update when the response headers
// come back — with no reader, and while an admin reader pages the whole
// log (Find of 10,000 records, GET /debug/decisions?limit=10000) in a
// loop. It reports the mean (ns/op), the 99th and 99.9th percentiles of
// one add+update and how many per million took over 5 ms (a wait for a
// reader's page: the percentiles miss these few long waits), and the
// reader's pages per second.
// B/op and allocs/op include the reader's.
//
//	go test -run '^$' -bench LogWrite -count 6 ./extproc/
func BenchmarkLogWrite(b *testing.B) {
	for _, reader := range []bool{false, true} {
		name := "reader=none"
		if reader {
			name = "reader=find10000"
		}
		b.Run(name, func(b *testing.B) {
			l := NewLog(10000, 64<<20)
			for i := range 10000 {
				r := benchRecord(i)
				l.Add(r)
				benchComplete(l, r)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			pages := 0
			if reader {
				wg.Go(func() {
					for ctx.Err() == nil {
						if len(l.Find(Filter{}, 10000)) == 0 {
							panic("a page of the full log is empty")
						}
						pages++
					}
				})
			}
			took := make([]time.Duration, 0, 1<<20)
			b.ReportAllocs()
			i := 10000
			for b.Loop() {
				i++
				began := time.Now()
				r := benchRecord(i)
				l.Add(r)
				benchComplete(l, r)
				if len(took) < cap(took) {
					took = append(took, time.Since(began))
				}
			}
			elapsed := b.Elapsed()
			cancel()
			wg.Wait()
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
			b.ReportMetric(float64(took[len(took)*999/1000].Nanoseconds()), "p99.9-ns")
			over := len(took) - sort.Search(len(took), func(i int) bool { return took[i] > 5*time.Millisecond })
			b.ReportMetric(1e6*float64(over)/float64(len(took)), "over-5ms/Mop")
			if reader {
				b.ReportMetric(float64(pages)/elapsed.Seconds(), "pages/s")
			}
		})
	}
}

// benchRecord is a routed request's record as decide fills it.
func benchRecord(i int) *Record {
	id := "bench-" + strconv.Itoa(i)
	return &Record{
		RequestID: id, Start: time.Unix(1700000000, 0), Source: "edge-us", Method: "POST", Path: "/v1/chat/completions",
		RequestedModel: "llama3-8b", Model: "llama3-8b", Priority: "standard", PriorityFrom: "default",
		TokenCost: 300, DemandBooked: 300, PromptTokens: 10, MaxTokens: 16, ModelFrom: "body", WeightsVersion: "v-0123456789abcdef",
		Candidates: []Candidate{
			{Cluster: "us-east-vllm", Weight: 5000, Share: 0.5},
			{Cluster: "us-west-sglang", Weight: 3000, Share: 0.3},
			{Cluster: "eu-west-tgi", Weight: 2000, Share: 0.2},
		},
		Draw: uint64(i), DrawFrom: "random", Slot: uint64(i % 10000), TotalWeight: 10000, Chosen: "us-east-vllm", Reason: "weighted",
	}
}

// benchComplete completes r as the response headers do.
func benchComplete(l *Log, r *Record) {
	_ = l.Update(r, func(r *Record) {
		r.Status, r.ServedCluster, r.ServedVersion, r.UpstreamHost = 200, "us-east-vllm", "v-0123456789abcdef", "10.0.0.7:8000"
		r.TotalMillis, r.Complete = 12.5, true
	})
}

// BenchmarkLogGet is the cost of Get on a full log of 10,000 records: it
// scans them, newest first (found: the newest; missing: all of them).
func BenchmarkLogGet(b *testing.B) {
	l := NewLog(10000, 64<<20)
	for i := range 10000 {
		l.Add(benchRecord(i))
	}
	for _, tc := range []struct{ name, id string }{{"found=newest", "bench-9999"}, {"found=oldest", "bench-0"}, {"missing", "bench-x"}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if _, ok := l.Get(tc.id); ok != (tc.name != "missing") {
					b.Fatal(tc.id)
				}
			}
		})
	}
}
