package demand

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	loadstatsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/weights"
)

// Aggregator checks the load reports of every reporter, sums what passes
// and turns it into rates for the controller. It knows its demand
// reporters (the nodes that send ILB demand reports, heartbeats
// included): one silent for more than three report intervals is
// forgotten, and the demand goes stale only when every reporter is gone.
// Safe for concurrent use.
type Aggregator struct {
	lim *limits // immutable
	log *slog.Logger
	now func() time.Time

	mu         sync.Mutex
	pending    map[Key]Counts        // ILB demand since the last Rates
	observed   map[[2]string]uint64  // Envoy reports: (source, engine cluster) -> issued requests since the last Rates
	last       map[[2]string]float64 // the rates of the last interval, for /debug
	since      time.Time
	totals     map[Key]Counts // since start, for /debug
	reports    uint64
	dropped    uint64                    // report entries refused
	expired    uint64                    // reporters forgotten for their silence
	known      map[string]*reporterState // demand reporters by node id
	heardSince bool                      // a demand reporter reported since the last Rates
	lastHeard  time.Time                 // end of the last Rates interval in which one did
	refusals   []Refusal                 // the last keptRefusals
	logs       limiter
}

// reporterState is what the aggregator knows of one demand reporter.
type reporterState struct {
	reported bool      // it reported since the last Rates
	last     time.Time // end of the last Rates interval in which it reported
	cov      *coverage // in-memory reports only: the time its reports may still claim
}

// AggregatorOptions configure an Aggregator.
type AggregatorOptions struct {
	Config *config.Config // validated; required
	Logger *slog.Logger   // nil: discard
	// Start is when the first Rates interval begins.
	Start time.Time
	// Now times the arrival of reports (the coverage of in-memory
	// reporters, refusal records, log rate limits); nil: time.Now. Rates
	// takes its own time: the two clocks are never compared.
	Now func() time.Time
}

// NewAggregator returns an aggregator whose first interval starts at now,
// timing reports with time.Now.
func NewAggregator(c *config.Config, log *slog.Logger, now time.Time) *Aggregator {
	return NewAggregatorWith(AggregatorOptions{Config: c, Logger: log, Start: now})
}

// NewAggregatorWith returns an aggregator configured by o.
func NewAggregatorWith(o AggregatorOptions) *Aggregator {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Aggregator{
		lim: newLimits(o.Config), log: o.Logger, now: o.Now, since: o.Start,
		pending: map[Key]Counts{}, observed: map[[2]string]uint64{}, last: map[[2]string]float64{}, totals: map[Key]Counts{},
		known: map[string]*reporterState{},
	}
}

// Origin is what the LRS server knows of a report besides its content.
type Origin struct {
	// Node is the stream's node, from its first message: every report of
	// the stream speaks as it, whatever node a later message names.
	Node *corev3.Node
	// MaxInterval is the longest interval the report may be believed to
	// cover, whatever it claims: the time its stream may still claim (one
	// report interval of slack, plus the time since the stream opened,
	// less what its earlier reports claimed; see coverage).
	MaxInterval time.Duration
	// Authorizer, if set, is asked for every configured source the report
	// speaks for (its demand localities' regions; for Envoy's own
	// reports, the node's cluster) before anything of it is summed.
	Authorizer Authorizer
}

// Report takes one report from an in-process reporter (the all-in-one
// process), believed to cover at most the time its node may still claim
// (as over LRS, but timed by the aggregator's clock). It is ReportFrom
// without an authorizer.
func (a *Aggregator) Report(req *loadstatsv3.LoadStatsRequest) error {
	node := req.GetNode()
	if err := a.lim.checkNode(node); err != nil {
		a.refuseNode(node, req, err)
		return err
	}
	now := a.now()
	a.mu.Lock()
	var cov *coverage
	if r := a.known[node.GetId()]; r != nil && r.cov != nil {
		cov = r.cov
	} else {
		cov = newCoverage(now, a.lim.interval)
	}
	most := cov.take(now, claimedReport(req))
	a.mu.Unlock()
	return a.take(context.Background(), req, Origin{Node: node, MaxInterval: most}, cov)
}

// ReportFrom takes one report of an LRS stream. The node must be an
// ext_proc reporter or an Envoy of a configured source, else nothing of
// the report is summed and the error wraps ErrUnknownNode. Then every
// entry is checked before any is summed (see docs/controller.md):
// finite values >= 0, within extproc.max_report_rate over the interval
// believed (for token cost, that rate times the model's largest request),
// shed within requests, known sources, models, priorities and engine
// clusters. Entries that fail are refused one by one, with a reason
// (Status.Refusals, a log line at most once a minute per reporter) and
// counted (Status.Dropped); the rest are summed, saturating. When the
// authorizer refuses a source the report speaks for, nothing of it is
// summed and its error is returned (wrapped), gRPC status and all.
func (a *Aggregator) ReportFrom(ctx context.Context, req *loadstatsv3.LoadStatsRequest, o Origin) error {
	if err := a.lim.checkNode(o.Node); err != nil {
		a.refuseNode(o.Node, req, err)
		return err
	}
	return a.take(ctx, req, o, nil)
}

// take checks, authorizes and sums a report of an accepted node; cov is
// the in-memory coverage to keep for a new reporter.
func (a *Aggregator) take(ctx context.Context, req *loadstatsv3.LoadStatsRequest, o Origin, cov *coverage) error {
	if len(req.GetClusterStats()) == 0 {
		return nil // the first message of a stream: the node only
	}
	b := a.lim.check(req, o.Node, o.MaxInterval)
	if o.Authorizer != nil {
		for _, s := range b.sources {
			if err := o.Authorizer.Authorize(ctx, s); err != nil {
				return fmt.Errorf("demand: report from node %s for source %s refused: %w", show(o.Node.GetId()), s, err)
			}
		}
	}
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reports++
	a.dropped = addUint(a.dropped, uint64(b.refused))
	if b.demand {
		a.heard(o.Node.GetId(), cov)
	}
	for k, c := range b.counts {
		sum := a.pending[k]
		sum.add(c)
		a.pending[k] = sum
		tot := a.totals[k]
		tot.add(c)
		a.totals[k] = tot
	}
	for k, n := range b.observed {
		a.observed[k] = addUint(a.observed[k], n)
	}
	if b.refused > 0 {
		a.noteRefusal(now, o.Node.GetId(), b.refused, b.reasons)
	}
	return nil
}

// refuseNode records a report refused for its node: every entry of it
// counts as refused.
func (a *Aggregator) refuseNode(node *corev3.Node, req *loadstatsv3.LoadStatsRequest, err error) {
	var entries int
	for _, cs := range req.GetClusterStats() {
		entries += max(1, len(cs.GetUpstreamLocalityStats()))
	}
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.dropped = addUint(a.dropped, uint64(entries))
	a.noteRefusal(now, node.GetId(), entries, []string{err.Error()})
}

// heard notes a demand report from node id (under a.mu); cov is the
// coverage of a new in-memory reporter.
func (a *Aggregator) heard(id string, cov *coverage) {
	r := a.known[id]
	if r == nil {
		r = &reporterState{}
		a.known[id] = r
	}
	if r.cov == nil {
		r.cov = cov
	}
	r.reported, a.heardSince = true, true
}

// Disconnected forgets a demand reporter whose LRS stream ended: it is
// gone, or will report again on a new stream.
func (a *Aggregator) Disconnected(node *corev3.Node) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.known, node.GetId())
}

// Rates returns the demand since the last call as rates per second
// (finite: they saturate at math.MaxFloat64), and how fresh it is. A
// demand reporter silent for more than three report intervals is
// forgotten (logged, counted in Status.Expired): its streams drop out of
// the demand. The freshness is now while at least one demand reporter is
// alive, or none ever reported; once every one is gone (expired or
// disconnected), it is the end of the last interval in which any
// reported, so the controller holds the weights after
// controller.stale_after. It is the controller's DemandFunc.
func (a *Aggregator) Rates(now time.Time) (weights.Demand, time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.heardSince {
		a.lastHeard, a.heardSince = now, false
	}
	horizon := expiryIntervals * a.lim.interval
	var gone []string
	for id, r := range a.known {
		if r.reported {
			r.reported, r.last = false, now
		}
		if now.Sub(r.last) > horizon {
			delete(a.known, id)
			gone = append(gone, show(id))
		}
	}
	if len(gone) > 0 {
		slices.Sort(gone)
		a.expired = addUint(a.expired, uint64(len(gone)))
		a.noteExpired(a.now(), gone, horizon)
	}
	at := now
	if len(a.known) == 0 && !a.lastHeard.IsZero() {
		at = a.lastHeard
	}
	secs := now.Sub(a.since).Seconds()
	out := weights.Demand{}
	if secs > 0 {
		for k, c := range a.pending {
			out[k] = weights.Rate{RequestsPerSecond: finite(float64(c.Requests) / secs), CostPerSecond: finite(c.TokenCost / secs)}
		}
		a.last = make(map[[2]string]float64, len(a.observed))
		for k, n := range a.observed {
			a.last[k] = finite(float64(n) / secs)
		}
	}
	a.pending, a.observed, a.since = map[Key]Counts{}, map[[2]string]uint64{}, now
	return out, at
}
