package xdsload

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// FleetOptions describe a fleet of simulated Envoys.
type FleetOptions struct {
	// Addr is the xDS server's host:port.
	Addr string
	// Streams is how many Envoys connect, each on its own connection.
	Streams int
	// Sources are the node.cluster values, dealt round robin.
	Sources []string
	// Mode is the ADS variant every Envoy speaks.
	Mode Mode
	// IDPrefix starts every node id (a new prefix makes new Envoys).
	IDPrefix string
	// Dials is how many connections are being opened at once (<= 0: 256).
	Dials int
	// Now is the clock of the measurements (nil: time.Now).
	Now func() time.Time
}

// Fleet is a running set of simulated Envoys.
type Fleet struct {
	clients []*client
	conns   []*grpc.ClientConn
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	now     func() time.Time
	// Started is when the first connection was opened.
	Started time.Time
}

// StartFleet connects every Envoy of o, Dials at a time, and returns
// once each stream is opened (not once it has its configuration: see
// WaitFull). The fleet runs until Close.
func StartFleet(ctx context.Context, o FleetOptions) (*Fleet, error) {
	if o.Streams < 1 || len(o.Sources) == 0 || o.Addr == "" {
		return nil, fmt.Errorf("xdsload: want streams >= 1 (got %d), at least one source and an address", o.Streams)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Dials <= 0 {
		o.Dials = 256
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	f := &Fleet{cancel: cancel, now: o.Now, Started: o.Now()}
	names := newNameCache()
	for i := range o.Streams {
		node := &corev3.Node{Id: fmt.Sprintf("%s-%d", o.IDPrefix, i), Cluster: o.Sources[i%len(o.Sources)]}
		f.clients = append(f.clients, newClient(node, o.Mode, names, o.Now))
	}
	f.conns = make([]*grpc.ClientConn, len(f.clients))
	sem := make(chan struct{}, o.Dials)
	for i, c := range f.clients {
		conn, err := grpc.NewClient(o.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("xdsload: client %d: %w", i, err)
		}
		f.conns[i] = conn
		// At most Dials Envoys are between dialling and their first
		// response: a restart's thundering herd, as the listen backlog
		// lets it through.
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		}
		f.wg.Add(2)
		go func() {
			defer f.wg.Done()
			c.run(runCtx, conn)
		}()
		go func() {
			defer f.wg.Done()
			<-c.started
			<-sem
		}()
	}
	return f, nil
}

// Close ends every stream and connection.
func (f *Fleet) Close() {
	f.cancel()
	for _, c := range f.conns {
		if c != nil {
			c.Close()
		}
	}
	f.wg.Wait()
}

// Err is the first stream error of the fleet, if any.
func (f *Fleet) Err() error {
	for _, c := range f.clients {
		if _, _, _, err := c.state(""); err != nil {
			return fmt.Errorf("envoy %s: %w", c.node.GetId(), err)
		}
	}
	return nil
}

// WaitFull waits until every Envoy holds all four types, and returns when
// the last one got there.
func (f *Fleet) WaitFull(ctx context.Context) (time.Time, error) {
	return f.wait(ctx, func(c *client) (time.Time, bool) {
		_, _, full, _ := c.state("")
		return full, !full.IsZero()
	})
}

// WaitVersion waits until every Envoy acknowledged, for typ, the version
// its source was given (want: source -> version), and returns when the
// last one did.
func (f *Fleet) WaitVersion(ctx context.Context, typ string, want map[string]string) (time.Time, error) {
	return f.wait(ctx, func(c *client) (time.Time, bool) {
		v, at, _, _ := c.state(typ)
		return at, v != "" && v == want[c.node.GetCluster()]
	})
}

func (f *Fleet) wait(ctx context.Context, done func(*client) (time.Time, bool)) (time.Time, error) {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	pending := append([]*client(nil), f.clients...)
	var last time.Time
	for {
		kept := pending[:0]
		for _, c := range pending {
			if _, _, _, err := c.state(""); err != nil {
				return time.Time{}, fmt.Errorf("envoy %s: %w", c.node.GetId(), err)
			}
			at, ok := done(c)
			if !ok {
				kept = append(kept, c)
				continue
			}
			if at.After(last) {
				last = at
			}
		}
		pending = kept
		if len(pending) == 0 {
			return last, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%d of %d Envoys not there yet: %w", len(pending), len(f.clients), ctx.Err())
		case <-t.C:
		}
	}
}
