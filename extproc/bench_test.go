package extproc

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/weights"
)

// BenchmarkDecide measures the request-path work of one chat request:
// parse the body and decide, for prompts of several sizes.
func BenchmarkDecide(b *testing.B) {
	c, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(Options{Config: c})
	if err != nil {
		b.Fatal(err)
	}
	w, _ := weights.Proportional{}.Compute(weights.Input{Config: c, Clusters: weights.StaticState(c)})
	if err := s.Publish(context.Background(), w); err != nil {
		b.Fatal(err)
	}
	st := s.state.Load()
	src := st.sources["edge-us"]
	for _, n := range []int{1 << 10, 32 << 10, 1 << 20} {
		body := []byte(fmt.Sprintf(`{"model":"llama3-8b","stream":true,"messages":[{"role":"user","content":%q}]}`, strings.Repeat("a", n)))
		b.Run(fmt.Sprintf("prompt=%dKiB", n>>10), func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				pb, err := parseBody(EndpointChat, body)
				if err != nil {
					b.Fatal(err)
				}
				x := &exchange{st: st, src: src, rec: &Record{}, prio: weights.Standard}
				if _, err := s.decide(x, &pb); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
