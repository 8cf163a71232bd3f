package extproc

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/decision"
	"github.com/ilbproject/ilb/live"
	"github.com/ilbproject/ilb/openai"
	"github.com/ilbproject/ilb/weights"
)

// benchSizes are the prompt sizes of the body benchmarks.
var benchSizes = []int{1 << 10, 32 << 10, 256 << 10, 1 << 20}

// benchChat is a chat request whose prompt is about n bytes of English
// text with a newline per sentence (escaped, as clients send it), in a
// system and a user message.
func benchChat(n int) []byte {
	const sentence = "The quick brown fox jumps over the lazy dog; \"quoted\" words too.\n"
	text := strings.Repeat(sentence, n/len(sentence)+1)[:n]
	sys, _ := json.Marshal(text[:n/4])
	user, _ := json.Marshal(text[n/4:])
	return fmt.Appendf(nil, `{"model":"llama3-8b","stream":true,"max_tokens":256,"user":"user-1234",`+
		`"messages":[{"role":"system","content":%s},{"role":"user","content":%s}],"temperature":0.7}`, sys, user)
}

// BenchmarkDecide measures the request-path work of one chat request:
// parse the body and decide, for prompts of several sizes.
func BenchmarkDecide(b *testing.B) {
	for _, picking := range []bool{false, true} {
		c, err := config.Load("../examples/demo/ilb.yaml")
		if err != nil {
			b.Fatal(err)
		}
		ls := &live.State{At: time.Now(), Clusters: map[string]live.Cluster{}}
		for i, e := range c.Clusters {
			c.Clusters[i].ReplicaPicking.Enabled = picking
			// 8 serving replicas a cluster, as a replica-picking cluster
			// would have.
			var reps []live.Replica
			for j := range 8 {
				reps = append(reps, live.Replica{Address: fmt.Sprintf("10.0.%d.%d:8000", i, j), Ramp: 1})
			}
			ls.Clusters[e.Name] = live.Cluster{Replicas: reps}
		}
		s, err := New(Options{Config: c})
		if err != nil {
			b.Fatal(err)
		}
		w, _ := weights.Proportional{}.Compute(weights.Input{Config: c, Clusters: weights.StaticState(c)})
		if err := s.Publish(context.Background(), w); err != nil {
			b.Fatal(err)
		}
		s.SetLive(ls)
		st := s.state.Load()
		src := st.sources["edge-us"]
		for _, n := range benchSizes {
			body := benchChat(n)
			b.Run(fmt.Sprintf("picking=%v/prompt=%dKiB", picking, n>>10), func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					pb, err := openai.ParseBody(openai.EndpointChat, body)
					if err != nil {
						b.Fatal(err)
					}
					x := &exchange{st: st, src: src, rec: &decision.Record{}, prio: weights.Standard, start: time.Now()}
					if _, err := s.decide(x, &pb); err != nil {
						b.Fatal(err)
					}
					x.ticket.FirstToken()
					x.ticket.Done()
				}
			})
		}
	}
}
