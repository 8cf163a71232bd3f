package test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	loadstatsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ilbproject/ilb/auth"
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/envoy"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/sim/stack"
)

// secureWorld runs examples/secure/ilb.yaml on loopback: ILB with mutual
// TLS on xDS/LRS and ext_proc, per-source peer rules, admin TLS and a
// token, every certificate from a fresh development CA in a temporary
// directory; each source's envoysim presents a certificate of its own
// source (spiffe://ilb.local/envoy/<source>/<node>). Weights are static
// (proportional) so that "nothing changed" can be checked.
func secureWorld(t *testing.T) (*stack.Stack, *auth.DevCA) {
	t.Helper()
	c, err := config.Load("../examples/secure/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ca, err := auth.NewDevCA("ilb.local")
	if err != nil {
		t.Fatal(err)
	}
	file := func(name string) string { return filepath.Join(dir, name) }
	if err := ca.WriteFiles(file("ca.pem"), file("ca-key.pem")); err != nil {
		t.Fatal(err)
	}
	server, err := ca.IssueServer("localhost")
	if err != nil {
		t.Fatal(err)
	}
	if err := server.WriteFiles(file("ilb.pem"), file("ilb-key.pem")); err != nil {
		t.Fatal(err)
	}
	token, err := auth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file("admin.token"), []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.Security.TLS = config.TLS{CertFile: file("ilb.pem"), KeyFile: file("ilb-key.pem"), ClientCAFile: file("ca.pem")}
	c.Security.Admin.TokenFile = file("admin.token")
	c.Controller.Policy = config.PolicyProportional
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	s := runStack(t, c, stack.Options{Seed: 5, EnvoyTLS: func(source, node string) (*envoy.UpstreamTLS, error) {
		leaf, err := ca.IssueEnvoy(source, node)
		if err != nil {
			return nil, err
		}
		cert, key := file("envoy-"+node+".pem"), file("envoy-"+node+"-key.pem")
		if err := leaf.WriteFiles(cert, key); err != nil {
			return nil, err
		}
		return &envoy.UpstreamTLS{CertFile: cert, KeyFile: key, CAFile: file("ca.pem"), ILBSAN: ca.SPIFFEID("ilb")}, nil
	}})
	return s, ca
}

// dialILB is a gRPC client of addr over TLS trusting the development CA,
// presenting client's certificate (none when client is nil).
func dialILB(t *testing.T, ca *auth.DevCA, addr string, client *auth.Leaf) *grpc.ClientConn {
	t.Helper()
	cfg := &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}
	if client != nil {
		cfg.Certificates = []tls.Certificate{client.TLSCertificate()}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// subscribe opens an ADS stream as node (id, cluster), asks for clusters
// and returns the first answer or the stream's error.
func subscribe(conn *grpc.ClientConn, id, cluster string) (*discoveryv3.DiscoveryResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	// A Send that finds the stream ended returns io.EOF; Recv says why.
	if err := st.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: id, Cluster: cluster}, TypeUrl: resourcev3.ClusterType}); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return st.Recv()
}

// reportLoad opens an LRS stream and sends one report; it returns the
// stream's error (nil when ILB answered it).
func reportLoad(conn *grpc.ClientConn, req *loadstatsv3.LoadStatsRequest) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := loadstatsv3.NewLoadReportingServiceClient(conn).StreamLoadStats(ctx)
	if err != nil {
		return err
	}
	if err := st.Send(req); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	_, err = st.Recv()
	return err
}

// demandOf is ILB's demand report of n requests of (source, model,
// priority) over one second.
func demandOf(node *corev3.Node, source, model, priority string, n uint64) *loadstatsv3.LoadStatsRequest {
	return &loadstatsv3.LoadStatsRequest{Node: node, ClusterStats: []*endpointv3.ClusterStats{{
		ClusterName: demand.ClusterName, LoadReportInterval: durationpb.New(time.Second),
		UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{
			Locality:            &corev3.Locality{Region: source, Zone: model, SubZone: priority},
			TotalIssuedRequests: n,
			LoadMetricStats: []*endpointv3.EndpointLoadMetricStats{
				{MetricName: demand.MetricTokenCost, NumRequestsFinishedWithMetric: n, TotalMetricValue: float64(100 * n)},
			},
		}},
	}}}
}

func nodeIDs(ns []string, s *stack.Stack) []string {
	for _, n := range s.App.XDS.Nodes() {
		ns = append(ns, n.ID)
	}
	return ns
}

// TestSecureStack is the acceptance test of mutual TLS on ILB's ports:
// Envoys of both sources, each with its own source's certificate, are
// routed and served; a client without a certificate gets nothing; an
// authorised Envoy of edge-us can neither subscribe nor report load nor
// run ext_proc as edge-eu, and changes nothing by trying.
func TestSecureStack(t *testing.T) {
	s, ca := secureWorld(t)
	const llama, qwen = "llama-3.1-8b-instruct", "qwen2.5-7b-instruct"

	t.Run("both sources are routed and served over mutual TLS", func(t *testing.T) {
		for _, e := range s.Envoys {
			resp, body := chat(t, e.URL, llama, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: %d %s", e.Source, resp.StatusCode, body)
			}
			rec, ok := s.App.ExtProc.Decisions().Get(resp.Header.Get("x-request-id"))
			if !ok || rec.Source != e.Source || rec.ServedCluster == "" || rec.ServedCluster != rec.Chosen {
				t.Errorf("%s: decision %+v; want one of this source, served where chosen", e.Source, rec)
			}
			cs := e.Sim.Stats().Clusters
			for _, cl := range []string{s.Config.Envoy.XDSCluster, s.Config.Envoy.ExtProcCluster} {
				if cs[cl].SSLHandshakes == 0 || cs[cl].SSLConnectionErrors != 0 {
					t.Errorf("%s: cluster %s TLS stats %+v; want handshakes and no error", e.Source, cl, cs[cl])
				}
			}
		}
	})

	weightsBefore := s.App.Controller.Current().Version()
	usLeaf, err := ca.IssueEnvoy("edge-us", "intruder")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("no certificate: the handshake fails, nothing is served", func(t *testing.T) {
		before := nodeIDs(nil, s)
		_, err := subscribe(dialILB(t, ca, s.App.XDSAddr(), nil), "anonymous", "edge-us")
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("ADS without a certificate: %v; want the connection refused (Unavailable)", err)
		}
		err = reportLoad(dialILB(t, ca, s.App.XDSAddr(), nil), demandOf(demand.ReporterNode("anonymous"), "edge-us", qwen, "critical", 1000))
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("LRS without a certificate: %v; want the connection refused (Unavailable)", err)
		}
		if after := nodeIDs(nil, s); slices.Contains(after, "anonymous") || len(after) != len(before) {
			t.Errorf("xDS nodes %v → %v; want no new node", before, after)
		}
	})

	t.Run("edge-us's certificate cannot subscribe as edge-eu", func(t *testing.T) {
		conn := dialILB(t, ca, s.App.XDSAddr(), usLeaf)
		_, err := subscribe(conn, "intruder", "edge-eu")
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("ADS as edge-eu: %v; want PermissionDenied", err)
		}
		// The same certificate as its own source is served: the refusal
		// is the source, not the peer.
		resp, err := subscribe(conn, "intruder-us", "edge-us")
		if err != nil || len(resp.GetResources()) == 0 {
			t.Fatalf("ADS as edge-us: %v, %d resources; want edge-us's clusters", err, len(resp.GetResources()))
		}
	})

	t.Run("edge-us's certificate cannot report load as edge-eu", func(t *testing.T) {
		conn := dialILB(t, ca, s.App.XDSAddr(), usLeaf)
		node := demand.ReporterNode("intruder-lrs")
		if err := reportLoad(conn, demandOf(node, "edge-eu", qwen, "critical", 100000)); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("LRS as edge-eu: %v; want PermissionDenied", err)
		}
		if err := reportLoad(conn, &loadstatsv3.LoadStatsRequest{Node: &corev3.Node{Id: "intruder-envoy", Cluster: "edge-eu"}, ClusterStats: []*endpointv3.ClusterStats{{
			ClusterName: "eu-west-vllm", LoadReportInterval: durationpb.New(time.Second),
			UpstreamLocalityStats: []*endpointv3.UpstreamLocalityStats{{TotalIssuedRequests: 100000}},
		}}}); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("Envoy's LRS as edge-eu: %v; want PermissionDenied", err)
		}
		st := s.App.Demand.Status()
		for _, r := range st.Reporters {
			if r.Node == node.GetId() {
				t.Errorf("reporter %s is known: %+v", node.GetId(), st.Reporters)
			}
		}
		for _, tot := range st.Totals {
			if tot.Source == "edge-eu" && tot.Model == qwen {
				t.Errorf("demand of edge-eu/%s booked: %+v", qwen, tot)
			}
		}
		for _, o := range st.Observed {
			if o.Source == "edge-eu" {
				t.Errorf("Envoy load of edge-eu taken: %+v", o)
			}
		}
	})

	t.Run("edge-us's certificate cannot run ext_proc as edge-eu", func(t *testing.T) {
		conn := dialILB(t, ca, s.App.ExtProcAddr(), usLeaf)
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), header.Source, "edge-eu"), 10*time.Second)
		defer cancel()
		st, err := extprocv3.NewExternalProcessorClient(conn).Process(ctx)
		if err != nil {
			t.Fatal(err)
		}
		const id = "intruder-request"
		hs := &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":method", RawValue: []byte("POST")},
			{Key: ":path", RawValue: []byte("/v1/chat/completions")},
			{Key: "x-request-id", RawValue: []byte(id)},
			{Key: header.Model, RawValue: []byte(llama)},
		}}
		// ILB may refuse the stream before this message leaves: Send then
		// returns io.EOF and Recv carries the refusal.
		if err := st.Send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{Headers: hs}}}); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		if _, err := st.Recv(); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("ext_proc as edge-eu: %v; want PermissionDenied", err)
		}
		if rec, ok := s.App.ExtProc.Decisions().Get(id); ok {
			t.Errorf("a decision was recorded: %+v", rec)
		}
	})

	if after := s.App.Controller.Current().Version(); after != weightsBefore {
		t.Errorf("weights moved from %s to %s", weightsBefore, after)
	}
}
