package test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/sim/loadgen"
	"github.com/ilbproject/ilb/weights"
	"github.com/ilbproject/ilb/xds"
)

// TestRogueEnvoyBansNothing: a peer holding one edge-us certificate,
// on another address than the source's Envoy (127.0.0.2), opens three ADS
// streams under three node ids and rejects every version it gets. The
// NACK quorum counts voters (verified identity and address), so the
// rogue is one rejector of edge-us's two voters, below the quorum: its
// nodes are held, nothing is banned or rolled back, and the real Envoy
// keeps its configuration. Counting node ids, it was 3 rejectors of 4
// (issue 24: "banned by quorum, rejectors 3, connected 5").
func TestRogueEnvoyBansNothing(t *testing.T) {
	s, ca := secureWorld(t)
	leaf, err := ca.IssueEnvoy("edge-us", "rogue")
	if err != nil {
		t.Fatal(err)
	}
	// The rogue's connection comes from 127.0.0.2: another host.
	cfg := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{leaf.TLSCertificate()}}
	conn := dialAnotherHost(t, s.App.XDSAddr(), credentials.NewTLS(cfg))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nacked := make(chan string, 64)
	for i := range 3 {
		st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		node := &corev3.Node{Id: fmt.Sprintf("rogue-%d", i), Cluster: "edge-us"}
		for _, typ := range []string{resourcev3.ClusterType, resourcev3.ListenerType} {
			if err := st.Send(&discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typ}); err != nil {
				t.Fatal(err)
			}
		}
		go func() { // reject everything
			for {
				resp, err := st.Recv()
				if err != nil {
					return
				}
				if st.Send(&discoveryv3.DiscoveryRequest{
					Node: node, TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce(),
					ErrorDetail: &rpcstatus.Status{Code: 3, Message: "rogue rejects " + resp.GetVersionInfo()},
				}) != nil {
					return
				}
				nacked <- node.GetId() + " " + resp.GetTypeUrl()
			}
		}()
	}
	// Six NACKs sent (three nodes, clusters and listeners); ILB has read
	// them once all three nodes are held.
	for range 6 {
		select {
		case <-nacked:
		case <-time.After(time.Minute):
			t.Fatal("the rogue got no configuration to reject")
		}
	}
	var st xds.RolloutStatus
	waitUntil(t, "the rogue's three nodes held", time.Minute, func() bool {
		for _, r := range s.App.XDS.Rollouts() {
			if r.Source == "edge-us" {
				st = r
			}
		}
		return st.Held == 3
	})
	if len(st.Rejected) != 0 {
		t.Fatalf("edge-us rollout %+v: a rogue peer banned versions", st)
	}
	for _, n := range s.App.XDS.Nodes() {
		if n.Cluster == "edge-us" && len(n.Held) != 0 && n.ID[:5] != "rogue" {
			t.Errorf("the real Envoy %s is held: %+v", n.ID, n.Held)
		}
	}
}

// TestRoguePeerHoldsItsShareOfStreams: a peer on another address
// (127.0.0.2) opens twice extproc.max_streams_per_peer ext_proc streams,
// each answered and then kept waiting for response headers that never
// come. It gets its share and no more, and the source's Envoy keeps
// having every ordinary request decided by ILB (none refused for
// max_streams). Before the per-peer bound, it held all max_streams.
func TestRoguePeerHoldsItsShareOfStreams(t *testing.T) {
	const maxStreams, perPeer = 60, 30
	s := startWorld(t, nil, func(c *config.Config) {
		c.Controller.Policy = config.PolicyProportional
		c.ExtProc.MaxStreams, c.ExtProc.MaxStreamsPerPeer = maxStreams, perPeer
	})
	conn := dialAnotherHost(t, s.App.ExtProcAddr(), insecure.NewCredentials())
	client := extprocv3.NewExternalProcessorClient(conn)
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), header.Source, "edge-us"))
	defer cancel()
	held, refused := 0, 0
	for range maxStreams {
		st, err := client.Process(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: headerMap(":method", "GET", ":path", "/v1/files/file-abc", ":authority", "rogue"), EndOfStream: true,
		}}}); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		switch _, err := st.Recv(); status.Code(err) {
		case codes.OK:
			held++ // answered: ILB now waits for response headers
		case codes.ResourceExhausted:
			refused++
		default:
			t.Fatalf("rogue stream: %v", err)
		}
	}
	if held != perPeer || refused != maxStreams-perPeer {
		t.Fatalf("the rogue holds %d streams, %d refused; want %d and %d", held, refused, perPeer, maxStreams-perPeer)
	}
	results, err := loadgen.Run(context.Background(), loadgen.Options{
		Targets: []loadgen.Target{{Source: "edge-us", URL: envoyURL(t, s, "edge-us")}}, Models: []string{"llama-3.1-8b-instruct"},
		Concurrency: 4, MaxTokens: 4, Requests: 40, Seed: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if r.Err != nil || r.Status != http.StatusOK {
			t.Fatalf("an ordinary request got %d (%v) while the rogue held its streams", r.Status, r.Err)
		}
	}
	if n := promValue(t, s, `ilb_extproc_streams_refused_total{reason="max_streams"}`); n != 0 {
		t.Errorf("%v of the Envoy's streams refused for max_streams", n)
	}
}

// TestRogueReportersShareOneBudget: a peer on another address
// (127.0.0.2) opens ten LRS streams as ten demand reporters and has each
// report the most one second may carry for edge-eu llama. Its streams
// share one budget: what is summed for the cell is at most
// extproc.max_report_rate over the time that passed plus one interval,
// not ten times that (issue 24: 10 reporters raised a source's demand to
// 2.5e11).
func TestRogueReportersShareOneBudget(t *testing.T) {
	s := startWorld(t, nil, func(c *config.Config) { c.Controller.Policy = config.PolicyProportional })
	k := demand.Key{Source: "edge-eu", Model: "llama-3.1-8b-instruct", Priority: weights.Standard}
	summed := func() uint64 {
		for _, tot := range s.App.Demand.Status().Totals {
			if tot.Key == k {
				return tot.Requests
			}
		}
		return 0
	}
	before, reportsBefore := summed(), s.App.Demand.Status().Reports
	conn := dialAnotherHost(t, s.App.XDSAddr(), insecure.NewCredentials())
	rate := uint64(s.Config.ExtProc.MaxReportRate)
	interval := s.Config.ExtProc.ReportInterval.Std()
	start := time.Now()
	const reporters = 10
	for i := range reporters {
		node := demand.ReporterNode(fmt.Sprintf("rogue-%d", i))
		client := demand.NewClient(conn, node)
		defer client.Close()
		if err := client.Report(demand.Encode(node, map[demand.Key]demand.Counts{k: {Requests: rate, TokenCost: float64(rate)}}, interval)); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "the rogue's ten reports taken", 30*time.Second, func() bool {
		return s.App.Demand.Status().Reports >= reportsBefore+reporters
	})
	elapsed := time.Since(start)
	got := summed() - before
	budget := uint64(float64(rate) * (elapsed + interval).Seconds())
	if got > budget+rate { // the Envoys' own demand of the cell is tiny beside a report's rate
		t.Fatalf("%d requests summed from %d reporters of one peer in %s; want at most %d (one budget)", got, reporters, elapsed, budget)
	}
	t.Logf("%d reporters of one peer: %d requests summed in %s (each reported %d), %d entries dropped", reporters, got, elapsed, rate, s.App.Demand.Status().Dropped)
}

// dialAnotherHost is a gRPC client of target whose connections come from
// 127.0.0.2: another host than the stack's Envoys (127.0.0.1).
func dialAnotherHost(t *testing.T, target string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return dialer.DialContext(ctx, "tcp", addr) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
