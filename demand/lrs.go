package demand

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	loadstatsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Sink takes load reports.
type Sink interface {
	Report(req *loadstatsv3.LoadStatsRequest) error
}

var (
	_ Sink                                   = (*Aggregator)(nil)
	_ Sink                                   = (*Client)(nil)
	_ loadstatsv3.LoadReportingServiceServer = (*Server)(nil)
)

// Authorizer decides whether the peer of a stream (its identity travels
// in ctx) may report load for a source. The error is a gRPC status
// (PermissionDenied, Unauthenticated) that ends the stream; the
// authorizer counts and logs its refusals.
type Authorizer interface {
	Authorize(ctx context.Context, source string) error
}

// ServerOptions configure an LRS Server.
type ServerOptions struct {
	Sink Sink // required
	// Interval is the reporting interval the server asks for.
	Interval time.Duration
	Logger   *slog.Logger // nil: discard
	// Authorizer checks every source a reporter reports for; nil: every
	// reporter may report for every source.
	Authorizer Authorizer
}

// Server is the control plane's LRS service: it asks every reporter for
// all its clusters every interval and hands each report to the sink.
type Server struct {
	loadstatsv3.UnimplementedLoadReportingServiceServer
	sink     Sink
	interval time.Duration
	log      *slog.Logger
	auth     Authorizer
}

// NewServer returns an LRS server feeding o.Sink, asking for a report
// every o.Interval.
func NewServer(o ServerOptions) *Server {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Server{sink: o.Sink, interval: o.Interval, log: o.Logger, auth: o.Authorizer}
}

// Register adds the LRS service to g.
func (s *Server) Register(g *grpc.Server) { loadstatsv3.RegisterLoadReportingServiceServer(g, s) }

// Disconnecter is a Sink that wants to know when a reporter's stream
// ends (the Aggregator forgets it, so its silence does not hold the
// weights).
type Disconnecter interface {
	Disconnected(node *corev3.Node)
}

var _ Disconnecter = (*Aggregator)(nil)

// StreamLoadStats serves one reporter: the first message names the node;
// the answer asks for every cluster every interval; each later message is
// a report (Envoy sends the node only once: it is kept for the stream).
// When the stream ends, a Disconnecter sink is told.
func (s *Server) StreamLoadStats(stream loadstatsv3.LoadReportingService_StreamLoadStatsServer) error {
	first, err := stream.Recv()
	if err != nil {
		return nil // the reporter went away before it said anything
	}
	node := first.GetNode()
	if d, ok := s.sink.(Disconnecter); ok {
		defer d.Disconnected(node)
	}
	if err := stream.Send(&loadstatsv3.LoadStatsResponse{SendAllClusters: true, LoadReportingInterval: durationpb.New(s.interval)}); err != nil {
		return fmt.Errorf("lrs: send: %w", err)
	}
	if err := s.take(first, node); err != nil {
		return err
	}
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
			return nil
		}
		if err != nil {
			return fmt.Errorf("lrs: receive: %w", err)
		}
		if err := s.take(req, node); err != nil {
			return err
		}
	}
}

func (s *Server) take(req *loadstatsv3.LoadStatsRequest, node *corev3.Node) error {
	if len(req.GetClusterStats()) == 0 {
		return nil
	}
	if req.GetNode() == nil {
		req = proto.CloneOf(req)
		req.Node = node
	}
	if err := s.sink.Report(req); err != nil {
		s.log.Warn("lrs: report refused", "node", node.GetId(), "err", err)
		return status.Errorf(codes.InvalidArgument, "lrs: report refused: %v", err)
	}
	return nil
}

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
// reporter's heartbeat, so that its silence means it is gone or stuck
// (stale demand), never that its Envoys had no traffic.
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
