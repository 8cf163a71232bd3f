package xds

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/weights"
)

var fuzzTypes = []string{resource.ClusterType, resource.EndpointType, resource.RouteType, resource.ListenerType, "type.googleapis.com/unknown", ""}

// FuzzRequests drives the xDS server's view of its peers — the callbacks
// go-control-plane calls for every stream, request and response — with
// requests of any node (id, cluster, metadata), type, nonce, version and
// NACK text, in any order over a few streams. Invariants: no panic; a
// refused request is a gRPC status of a known code; what the server
// reports about its nodes (/debug/xds, /debug/rollout) stays bounded and
// encodes as JSON; banned versions per source stay under their bound.
func FuzzRequests(f *testing.F) {
	cfg, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		f.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.Cleanup(cancel)
	srv, err := New(ctx, Options{Config: cfg})
	if err != nil {
		f.Fatal(err)
	}
	w, err := weights.Proportional{}.Compute(weights.Input{Config: cfg, Clusters: weights.StaticState(cfg)})
	if err != nil {
		f.Fatal(err)
	}
	if err := srv.Publish(ctx, w); err != nil {
		f.Fatal(err)
	}
	f.Add([]byte{0, 1, 2, 3}, "e1", "edge-us", "k", "v", "bad route")
	f.Add([]byte{0, 1 | 2<<3, 2 | 2<<3, 3 | 2<<3, 4}, "e2", "edge-eu", "", "", "")
	f.Add([]byte{0, 1, 1 | 8<<3, 3, 4, 0, 1}, "", "edge-mars", "m", "1", "\x00\xff")
	f.Add([]byte{5, 1, 6, 1, 2, 3, 7}, "e3", "edge-us", "", "x", "nack")
	var next int64
	f.Fuzz(func(t *testing.T, ops []byte, id, cluster, metaKey, version, message string) {
		base := next
		next += 8
		fuzzRequestsOnce(ctx, t, srv, base, ops, id, cluster, metaKey, version, message)
	})
}

// fuzzRequestsOnce is one input of FuzzRequests over streams base..base+3.
func fuzzRequestsOnce(ctx context.Context, t testing.TB, srv *Server, base int64, ops []byte, id, cluster, metaKey, version, message string) {
	t.Helper()
	cb := srv.tracker.callbacks()
	{
		nonce := 0
		for i, op := range ops {
			if i == 32 {
				break
			}
			sid := base + int64(op>>6) // up to four streams
			typ := fuzzTypes[int(op>>3&7)%len(fuzzTypes)]
			node := &corev3.Node{Id: id, Cluster: cluster}
			if metaKey != "" {
				node.Metadata = &structpb.Struct{Fields: map[string]*structpb.Value{metaKey: structpb.NewStringValue(message)}}
			}
			switch op & 7 {
			case 0, 5:
				if op&7 == 5 {
					_ = cb.OnDeltaStreamOpen(ctx, sid, typ)
					continue
				}
				_ = cb.OnStreamOpen(ctx, sid, typ)
			case 1: // a request naming the node
				check(t, cb.OnStreamRequest(sid, &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: typ, VersionInfo: version}))
			case 2: // the server answers
				nonce++
				cb.OnStreamResponse(ctx, sid, nil, &discoveryv3.DiscoveryResponse{TypeUrl: typ, VersionInfo: version, Nonce: strconv.Itoa(nonce)})
			case 3: // an ACK or a NACK of the last answer
				req := &discoveryv3.DiscoveryRequest{TypeUrl: typ, VersionInfo: version, ResponseNonce: strconv.Itoa(nonce)}
				if message != "" {
					req.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: message}
				}
				check(t, cb.OnStreamRequest(sid, req))
			case 4:
				cb.OnStreamClosed(sid, node)
			case 6:
				check(t, cb.OnStreamDeltaRequest(sid, &discoveryv3.DeltaDiscoveryRequest{Node: node, TypeUrl: typ, ResponseNonce: strconv.Itoa(nonce)}))
			case 7:
				cb.OnDeltaStreamClosed(sid, node)
			}
		}
		for s := base; s < base+4; s++ {
			cb.OnStreamClosed(s, nil)
		}
		srv.tracker.sweep(time.Now().Add(time.Hour))
		nodes, rollouts := srv.Nodes(), srv.Rollouts()
		if _, err := json.Marshal(nodes); err != nil {
			t.Fatalf("nodes do not encode: %v", err)
		}
		if _, err := json.Marshal(rollouts); err != nil {
			t.Fatalf("rollouts do not encode: %v", err)
		}
		for _, n := range nodes {
			if len(n.ID) > 2*maxNodeID || len(n.Cluster) > 64 {
				t.Fatalf("node id of %d bytes, cluster of %d", len(n.ID), len(n.Cluster))
			}
			if n.LastNACK != nil && len(n.LastNACK.Message) > maxMessage+32 {
				t.Fatalf("NACK message of %d bytes", len(n.LastNACK.Message))
			}
		}
		for _, r := range rollouts {
			if len(r.Rejected) > maxBanned {
				t.Fatalf("source %s keeps %d bans", r.Source, len(r.Rejected))
			}
		}
	}
}

// check fails the test unless err is nil or a gRPC status of a code the
// server uses to refuse a request.
func check(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	s, ok := status.FromError(err)
	if !ok {
		t.Fatalf("refusal %v is not a gRPC status", err)
	}
	switch s.Code() {
	case codes.InvalidArgument, codes.PermissionDenied, codes.Internal:
	default:
		t.Fatalf("refusal with code %s: %v", s.Code(), err)
	}
	if len(s.Message()) > 512 {
		t.Fatalf("refusal message of %d bytes", len(s.Message()))
	}
}
