package demand

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	loadstatsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ilbproject/ilb/internal/bound"
)

// Sink takes load reports.
type Sink interface {
	Report(req *loadstatsv3.LoadStatsRequest) error
}

// StreamSink takes the reports of LRS streams: each with what the server
// knows of its origin (the stream's node, the interval it may cover, who
// may authorize it), and the end of each stream.
type StreamSink interface {
	ReportFrom(ctx context.Context, req *loadstatsv3.LoadStatsRequest, o Origin) error
	// Disconnected is called when the stream of a node accepted by
	// ReportFrom ends.
	Disconnected(node *corev3.Node)
}

var (
	_ Sink                                   = (*Aggregator)(nil)
	_ Sink                                   = (*Client)(nil)
	_ StreamSink                             = (*Aggregator)(nil)
	_ loadstatsv3.LoadReportingServiceServer = (*Server)(nil)
	_ Authorizer                             = (*streamAuth)(nil)
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
	Sink StreamSink // required
	// Interval is the reporting interval the server asks for, and the
	// slack of what a report may claim to cover; 0: 1s.
	Interval time.Duration
	Logger   *slog.Logger // nil: discard
	// Authorizer checks every source a report speaks for; nil: every
	// reporter may report for every source.
	Authorizer Authorizer
	// Now times the streams (what a report may claim to cover); nil:
	// time.Now.
	Now func() time.Time
	// Voter names a stream's peer (ILB: the verified identity and IP
	// address, or the IP address): the streams of one voter naming one
	// source (node.cluster) share what their reports may claim to cover,
	// so that more streams do not raise its demand bound. nil: each
	// stream has its own.
	Voter func(ctx context.Context) string
}

// Server is the control plane's LRS service: it asks every reporter for
// all its clusters every interval and hands each report to the sink.
type Server struct {
	loadstatsv3.UnimplementedLoadReportingServiceServer
	sink     StreamSink
	interval time.Duration
	log      *slog.Logger
	auth     Authorizer
	now      func() time.Time
	voter    func(ctx context.Context) string
	voters   *voterCoverage
}

// NewServer returns an LRS server feeding o.Sink, asking for a report
// every o.Interval.
func NewServer(o ServerOptions) *Server {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Server{
		sink: o.Sink, interval: o.Interval, log: o.Logger, auth: o.Authorizer, now: o.Now,
		voter: o.Voter, voters: newVoterCoverage(o.Interval),
	}
}

// Register adds the LRS service to g.
func (s *Server) Register(g *grpc.Server) { loadstatsv3.RegisterLoadReportingServiceServer(g, s) }

// StreamLoadStats serves one reporter. The first message names the node,
// which every later report of the stream speaks as (Envoy sends it only
// once); a node the sink does not know ends the stream
// (InvalidArgument), and so does a source the authorizer refuses (its
// status). The answer asks for every cluster every interval. Each report
// is believed to cover at most the time the stream may still claim (see
// coverage). When the stream of an accepted node ends, the sink is told.
func (s *Server) StreamLoadStats(stream loadstatsv3.LoadReportingService_StreamLoadStatsServer) error {
	first, err := stream.Recv()
	if err != nil {
		return nil // the reporter went away before it said anything
	}
	ctx := stream.Context()
	node := first.GetNode()
	var cov claimer = newCoverage(s.now(), s.interval)
	if s.voter != nil {
		// One budget per voter and source its node names: Envoys of
		// several sources may share a host (and an address), and a
		// source's reports may not spend another's.
		voter := s.voter(ctx) + "|" + bound.String(node.GetCluster(), bound.Name)
		s.voters.open(voter, s.now())
		defer func() { s.voters.closed(voter, s.now()) }()
		cov = sharedCoverage{v: s.voters, voter: voter}
	}
	var auth Authorizer
	if s.auth != nil {
		auth = &streamAuth{auth: s.auth, allowed: map[string]bool{}}
	}
	if err := s.take(ctx, first, node, cov, auth); err != nil {
		return err
	}
	defer s.sink.Disconnected(node)
	if err := stream.Send(&loadstatsv3.LoadStatsResponse{SendAllClusters: true, LoadReportingInterval: durationpb.New(s.interval)}); err != nil {
		return fmt.Errorf("lrs: send: %w", err)
	}
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
			return nil
		}
		if err != nil {
			return fmt.Errorf("lrs: receive: %w", err)
		}
		if len(req.GetClusterStats()) == 0 {
			continue
		}
		if err := s.take(ctx, req, node, cov, auth); err != nil {
			return err
		}
	}
}

// take hands one message of the stream to the sink, as the stream's node.
func (s *Server) take(ctx context.Context, req *loadstatsv3.LoadStatsRequest, node *corev3.Node, cov claimer, auth Authorizer) error {
	o := Origin{Node: node, MaxInterval: cov.take(s.now(), claimedReport(req)), Authorizer: auth}
	err := s.sink.ReportFrom(ctx, req, o)
	if errors.Is(err, ErrUnknownNode) {
		s.log.DebugContext(ctx, "lrs: stream refused", "err", err)
		return status.Errorf(codes.InvalidArgument, "lrs: %v", err)
	}
	return err // nil, or the authorizer's refusal with its status
}

// streamAuth remembers, for one stream (one peer identity), the sources
// its authorizer allowed.
type streamAuth struct {
	auth    Authorizer
	allowed map[string]bool // configured sources only: bounded by the configuration
}

func (a *streamAuth) Authorize(ctx context.Context, source string) error {
	if a.allowed[source] {
		return nil
	}
	if err := a.auth.Authorize(ctx, source); err != nil {
		return err
	}
	a.allowed[source] = true
	return nil
}

// claimer is the time a stream's reports may still claim to cover: its
// own coverage, or its voter's.
type claimer interface {
	take(now time.Time, claim time.Duration) time.Duration
}

var (
	_ claimer = (*coverage)(nil)
	_ claimer = sharedCoverage{}
)

// sharedCoverage is a stream's view of its voter's coverage.
type sharedCoverage struct {
	v     *voterCoverage
	voter string
}

func (c sharedCoverage) take(now time.Time, claim time.Duration) time.Duration {
	return c.v.take(c.voter, now, claim)
}
