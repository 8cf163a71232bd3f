package demand

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	loadstatsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/grpc"
)

// Client is a Sink that streams reports to an LRS server over gRPC,
// (re)opening the stream when needed: a report that cannot be sent is an
// error, and the next one tries a new stream.
type Client struct {
	client loadstatsv3.LoadReportingServiceClient
	node   *corev3.Node

	mu     sync.Mutex
	stream grpc.BidiStreamingClient[loadstatsv3.LoadStatsRequest, loadstatsv3.LoadStatsResponse]
	cancel context.CancelFunc
}

// NewClient reports as node over conn.
func NewClient(conn grpc.ClientConnInterface, node *corev3.Node) *Client {
	return &Client{client: loadstatsv3.NewLoadReportingServiceClient(conn), node: node}
}

// Report sends one report.
func (c *Client) Report(req *loadstatsv3.LoadStatsRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stream == nil {
		ctx, cancel := context.WithCancel(context.Background())
		st, err := c.client.StreamLoadStats(ctx)
		if err == nil {
			err = st.Send(&loadstatsv3.LoadStatsRequest{Node: c.node})
		}
		if err != nil {
			cancel()
			return fmt.Errorf("lrs client: open stream: %w", err)
		}
		go func() { // drain the server's answers; the stream ends with cancel
			for {
				if _, err := st.Recv(); err != nil {
					return
				}
			}
		}()
		c.stream, c.cancel = st, cancel
	}
	if err := c.stream.Send(req); err != nil {
		c.cancel()
		c.stream = nil
		return fmt.Errorf("lrs client: send: %w", err)
	}
	return nil
}

// Close ends the stream.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stream != nil {
		_ = c.stream.CloseSend()
		c.cancel()
		c.stream = nil
	}
}

// Reporter flushes a meter into a sink every interval, with an empty
// report (a heartbeat) when nothing was counted.
type Reporter struct {
	Meter    *Meter
	Sink     Sink
	Node     *corev3.Node
	Interval time.Duration
	Now      func() time.Time // nil: time.Now
	Logger   *slog.Logger     // nil: discard
}

// Run reports every interval until ctx is done, then flushes once more.
func (r *Reporter) Run(ctx context.Context) error {
	now := r.Now
	if now == nil {
		now = time.Now
	}
	log := r.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t := time.NewTicker(r.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			r.flush(now(), log)
			return nil
		case <-t.C:
			r.flush(now(), log)
		}
	}
}

// flush reports the meter's counts, even none: an empty report is the
// reporter's heartbeat, so that its silence means it is gone or stuck,
// never that its Envoys had no traffic.
func (r *Reporter) flush(now time.Time, log *slog.Logger) {
	counts, d := r.Meter.Flush(now)
	if err := r.Sink.Report(Encode(r.Node, counts, d)); err != nil {
		// The counts of this interval are lost: the controller sees a dip
		// it smooths over; retrying would double-count on a half-sent stream.
		log.Warn("demand report not delivered", "err", err, "streams", len(counts))
	}
}

// ReporterNode is the node an ext_proc service reports as.
func ReporterNode(id string) *corev3.Node {
	return &corev3.Node{Id: id, Cluster: reporterNodeType}
}
