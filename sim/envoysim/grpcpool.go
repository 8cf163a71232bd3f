package envoysim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// grpcPool holds one gRPC client connection per upstream address and
// TLS configuration, for the xDS and ext_proc clusters: h2c, or TLS as
// the cluster's transport_socket says (envoysim runs the handshake itself,
// so SNI, ALPN and verification are Envoy's, not grpc-go's).
type grpcPool struct {
	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

func newGRPCPool() *grpcPool {
	return &grpcPool{conns: map[string]*grpc.ClientConn{}}
}

// dial returns the connection to addr for cluster cc, creating it on
// first use. A handshake failure fails the connection attempt: streams
// on it fail with Unavailable. The ADS client retries with its own
// back-off; an ext_proc stream resets the connection's back-off and
// connects at once, as Envoy's connection pool does (extproc_stream.go).
// stats counts the handshakes.
func (p *grpcPool) dial(cc *clusterConfig, addr string, stats *statsRegistry) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("grpc pool closed")
	}
	key := addr
	if cc.tls != nil {
		key += "|tls:" + cc.tls.key
	}
	if c := p.conns[key]; c != nil {
		return c, nil
	}
	u, timeout, outcome := cc.tls, cc.connectTimeout, stats.tls(cc.name)
	c, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			return dialUpstream(ctx, addr, timeout, u, outcome)
		}),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 500 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}))
	if err != nil {
		return nil, fmt.Errorf("grpc client for %s: %w", addr, err)
	}
	p.conns[key] = c
	return c, nil
}

// withMetadata adds grpc_service.initial_metadata to the outgoing gRPC
// metadata of ctx.
func withMetadata(ctx context.Context, md []headerValue) context.Context {
	if len(md) == 0 {
		return ctx
	}
	kv := make([]string, 0, 2*len(md))
	for _, m := range md {
		kv = append(kv, m.key, m.value)
	}
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// close closes every connection; later dials fail.
func (p *grpcPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}
