package envoysim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
)

// grpcPool holds one insecure (h2c) gRPC client connection per upstream
// address, for the xDS and ext_proc clusters.
type grpcPool struct {
	mu     sync.Mutex
	conns  map[string]*grpc.ClientConn
	closed bool
}

func newGRPCPool() *grpcPool {
	return &grpcPool{conns: map[string]*grpc.ClientConn{}}
}

// dial returns the connection to addr, creating it on first use.
func (p *grpcPool) dial(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, errors.New("grpc pool closed")
	}
	if c := p.conns[addr]; c != nil {
		return c, nil
	}
	c, err := grpc.NewClient("passthrough:///"+addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 500 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}))
	if err != nil {
		return nil, fmt.Errorf("grpc client for %s: %w", addr, err)
	}
	p.conns[addr] = c
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
