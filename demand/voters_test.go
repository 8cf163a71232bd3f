package demand_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc/peer"

	"github.com/ilbproject/ilb/demand"
)

// TestLRSBudgetPerVoter: the streams of one voter (ServerOptions.Voter,
// here the peer's address: every stream of the test comes from
// 127.0.0.1) share what their reports may claim to cover. Ten reporters
// each claiming the most a second allows get one second's worth summed
// between them, not ten (issue 24: 10 reporters of one certificate raised
// a source's demand tenfold); without a voter function each stream has
// its own second.
func TestLRSBudgetPerVoter(t *testing.T) {
	const llama = "llama-3.1-8b-instruct"
	for _, c := range []struct {
		name    string
		voter   bool
		summed  int // reports summed of ten
		dropped uint64
	}{
		{"one voter, ten streams: one second's worth", true, 1, 9},
		{"without a voter, ten streams: ten seconds' worth", false, 10, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			agg := demand.NewAggregator(demoConfig(t), nil, t0)
			clk := newClock(time.Unix(5000, 0))
			o := demand.ServerOptions{Sink: agg, Interval: time.Second, Now: clk.now}
			if c.voter {
				o.Voter = peerIP
			}
			conn := startLRSWith(t, o)
			most := uint64(demoConfig(t).ExtProc.MaxReportRate) // requests a second may carry
			for i := range 10 {
				st := lrsStream(t, conn, demand.ReporterNode(fmt.Sprintf("reporter-%d", i)))
				if err := st.Send(demandReport(nil, time.Second, loc("edge-us", llama, "standard", most, 40*float64(most), 0, 0))); err != nil {
					t.Fatal(err)
				}
				waitFor(t, func() bool { return agg.Status().Reports == uint64(i+1) })
			}
			if got := agg.Status().Dropped; got != c.dropped {
				t.Errorf("dropped %d of 10 reports; want %d (%+v)", got, c.dropped, agg.Status().Refusals)
			}
		})
	}
}

// peerIP names a stream by its peer's IP address, as ILB does without
// client certificates.
func peerIP(ctx context.Context) string {
	p, _ := peer.FromContext(ctx)
	host, _, _ := net.SplitHostPort(p.Addr.String())
	return host
}
