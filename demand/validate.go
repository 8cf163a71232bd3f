package demand

import (
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	loadstatsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/weights"
)

// ErrUnknownNode is the error of a report whose node is missing or
// names no known reporter: nothing it says is summed, and the LRS server
// ends its stream (InvalidArgument).
var ErrUnknownNode = errors.New("unknown node")

const (
	maxNodeID  = 256 // bytes of a node id the aggregator keeps
	maxShown   = 64  // bytes of a peer's string shown in a reason
	maxReasons = 3   // reasons kept per refused report
)

// limits are what reports are checked against, indexed once from the
// configuration (which is immutable), so checking needs no lock.
type limits struct {
	sources  map[string]config.Source
	models   map[string]modelLimit // by name and alias
	clusters map[string]config.EngineCluster
	infra    map[string]bool // Envoy clusters of ILB's own bootstrap (ext_proc, xDS)
	maxRate  float64         // requests/s one report may claim per stream
	interval time.Duration   // the report interval
}

// modelLimit is a model's canonical name and the largest token cost one
// request of it can have.
type modelLimit struct {
	name    string
	maxCost float64
}

func newLimits(c *config.Config) *limits {
	l := &limits{
		sources: map[string]config.Source{}, models: map[string]modelLimit{}, clusters: map[string]config.EngineCluster{},
		infra:   map[string]bool{c.Envoy.ExtProcCluster: true, c.Envoy.XDSCluster: true},
		maxRate: c.ExtProc.MaxReportRate, interval: c.ExtProc.ReportInterval.Std(),
	}
	if l.maxRate <= 0 {
		l.maxRate = config.Default().ExtProc.MaxReportRate
	}
	if l.interval <= 0 {
		l.interval = config.Default().ExtProc.ReportInterval.Std()
	}
	for _, s := range c.Sources {
		l.sources[s.Name] = s
	}
	for _, m := range c.Models {
		ctxTokens, outTokens := m.ContextTokens, m.MaxOutputTokens
		if ctxTokens <= 0 {
			ctxTokens = config.DefaultContextTokens
		}
		if outTokens <= 0 {
			outTokens = min(config.DefaultMaxOutputTokens, ctxTokens)
		}
		ml := modelLimit{name: m.Name, maxCost: m.TokenCost(float64(ctxTokens), float64(outTokens))}
		l.models[m.Name] = ml
		for _, a := range m.Aliases {
			l.models[a] = ml
		}
	}
	for _, e := range c.Clusters {
		l.clusters[e.Name] = e
	}
	return l
}

// checkNode accepts a node that names itself (an id of at most maxNodeID
// bytes) and is an ext_proc reporter (cluster ilb-extproc) or an Envoy
// of a configured source (cluster = the source).
func (l *limits) checkNode(node *corev3.Node) error {
	id, cluster := node.GetId(), node.GetCluster()
	switch {
	case node == nil:
		return fmt.Errorf("%w: no node: the first message of a stream must name it", ErrUnknownNode)
	case id == "":
		return fmt.Errorf("%w: node.id is empty", ErrUnknownNode)
	case len(id) > maxNodeID:
		return fmt.Errorf("%w: node.id %s: want at most %d bytes", ErrUnknownNode, show(id), maxNodeID)
	case cluster != reporterNodeType && !l.known(cluster):
		return fmt.Errorf("%w: node %s: node.cluster %s is neither %q (an ext_proc reporter) nor a configured source",
			ErrUnknownNode, show(id), show(cluster), reporterNodeType)
	}
	return nil
}

func (l *limits) known(source string) bool {
	_, ok := l.sources[source]
	return ok
}

// batch is one report, checked: what may be summed, what was refused and
// why, and the configured sources it speaks for.
type batch struct {
	demand   bool // it carries ILB's demand ClusterStats: a heartbeat at least
	counts   map[Key]Counts
	observed map[[2]string]uint64 // (source, engine cluster) -> issued requests
	sources  []string             // configured sources named, in order of appearance
	named    map[string]bool      // the same, as a set
	refused  int                  // entries refused
	reasons  []string             // the first maxReasons reasons
}

// speaks notes a configured source the report speaks for.
func (b *batch) speaks(source string) {
	if !b.named[source] {
		b.named[source] = true
		b.sources = append(b.sources, source)
	}
}

// refuse counts n refused entries and keeps the reason while there is
// room (formatting it only then: a report may hold many entries).
func (b *batch) refuse(n int, reason func() string) {
	b.refused += n
	if len(b.reasons) < maxReasons {
		b.reasons = append(b.reasons, reason())
	}
}

// where names a locality in a reason.
func where(loc *corev3.Locality) string {
	return fmt.Sprintf("%s/%s/%s", show(loc.GetRegion()), show(loc.GetZone()), show(loc.GetSubZone()))
}

// check checks every entry of req from node (already accepted by
// checkNode). No report is believed to cover more than maxInterval: the
// time its reporter may still claim (see coverage).
func (l *limits) check(req *loadstatsv3.LoadStatsRequest, node *corev3.Node, maxInterval time.Duration) *batch {
	b := &batch{counts: map[Key]Counts{}, observed: map[[2]string]uint64{}, named: map[string]bool{}}
	for _, cs := range req.GetClusterStats() {
		iv := interval{claimed: claimed(cs)}
		iv.believed = max(0, min(iv.claimed, maxInterval))
		if cs.GetClusterName() == ClusterName {
			b.demand = true
			l.checkDemand(b, cs, iv)
		} else {
			l.checkEnvoy(b, node.GetCluster(), cs, iv)
		}
	}
	return b
}

// interval is what a ClusterStats claims to cover and what of it is
// believed.
type interval struct{ claimed, believed time.Duration }

func (iv interval) String() string {
	if iv.claimed == iv.believed {
		return iv.believed.String()
	}
	return fmt.Sprintf("%s believed (claimed %s)", iv.believed, iv.claimed)
}

// checkDemand checks ILB's demand localities (region: source, zone:
// model, sub_zone: priority).
func (l *limits) checkDemand(b *batch, cs *endpointv3.ClusterStats, iv interval) {
	reqBound := l.maxRate * iv.believed.Seconds()
	for _, ls := range cs.GetUpstreamLocalityStats() {
		loc := ls.GetLocality()
		refuse := func(why string) { b.refuse(1, func() string { return "locality " + where(loc) + ": " + why }) }
		if !l.known(loc.GetRegion()) {
			refuse("unknown source")
			continue
		}
		b.speaks(loc.GetRegion())
		m, ok := l.models[loc.GetZone()]
		if !ok {
			refuse("unknown model")
			continue
		}
		p, err := weights.ParsePriority(loc.GetSubZone())
		if err != nil {
			refuse("unknown priority: want critical, standard or sheddable")
			continue
		}
		k := Key{Source: loc.GetRegion(), Model: m.name, Priority: p}
		if _, dup := b.counts[k]; dup {
			refuse(fmt.Sprintf("the stream (%s, %s, %s) is already in this report", k.Source, k.Model, k.Priority))
			continue
		}
		c, err := localityCounts(ls)
		if err == nil {
			err = checkCounts(c, reqBound, m, iv, l.maxRate)
		}
		if err != nil {
			refuse(err.Error())
			continue
		}
		b.counts[k] = c
	}
}

// localityCounts reads one demand locality.
func localityCounts(ls *endpointv3.UpstreamLocalityStats) (Counts, error) {
	c := Counts{Requests: ls.GetTotalIssuedRequests()}
	var cost, shed bool
	for _, m := range ls.GetLoadMetricStats() {
		switch m.GetMetricName() {
		case MetricTokenCost:
			if cost {
				return c, fmt.Errorf("metric %s given twice", MetricTokenCost)
			}
			cost, c.TokenCost = true, m.GetTotalMetricValue()
		case MetricShed:
			if shed {
				return c, fmt.Errorf("metric %s given twice", MetricShed)
			}
			shed, c.Shed, c.ShedCost = true, m.GetNumRequestsFinishedWithMetric(), m.GetTotalMetricValue()
		}
	}
	return c, nil
}

// checkCounts bounds one stream's counts: values finite and >= 0, at
// most maxRate requests/s over the believed interval, token cost at most
// that many requests of the model's largest possible cost (a bound on
// the rate, not per request: cost confirmed now may belong to requests
// counted in an earlier report), shed within requests and shed cost
// within token cost.
func checkCounts(c Counts, reqBound float64, m modelLimit, iv interval, maxRate float64) error {
	switch {
	case !valid(c.TokenCost):
		return fmt.Errorf("token cost %v: want a finite number >= 0", c.TokenCost)
	case !valid(c.ShedCost):
		return fmt.Errorf("shed cost %v: want a finite number >= 0", c.ShedCost)
	case float64(c.Requests) > reqBound:
		return fmt.Errorf("%d requests over %s: want at most %.6g (extproc.max_report_rate %g/s)", c.Requests, iv, reqBound, maxRate)
	case c.TokenCost > reqBound*m.maxCost:
		return fmt.Errorf("token cost %.6g over %s: want at most %.6g (%g requests/s × %g units, the largest request of %s)",
			c.TokenCost, iv, reqBound*m.maxCost, maxRate, m.maxCost, m.name)
	case c.Shed > c.Requests:
		return fmt.Errorf("%d shed of %d requests: want shed <= requests", c.Shed, c.Requests)
	case c.ShedCost > c.TokenCost:
		return fmt.Errorf("shed cost %.6g over token cost %.6g: want shed cost <= token cost", c.ShedCost, c.TokenCost)
	}
	return nil
}

// checkEnvoy checks Envoy's own report of one cluster: the node must be
// an Envoy of a configured source, the cluster an engine cluster that
// source may use, and each locality's issued requests within the rate
// bound. The clusters of ILB's own bootstrap (ext_proc, xDS) are Envoy's
// too, and are skipped without a word.
func (l *limits) checkEnvoy(b *batch, source string, cs *endpointv3.ClusterStats, iv interval) {
	name, entries := cs.GetClusterName(), max(1, len(cs.GetUpstreamLocalityStats()))
	s, ok := l.sources[source]
	if !ok {
		b.refuse(entries, func() string {
			return fmt.Sprintf("cluster %s: Envoy's cluster stats need a node whose cluster is a configured source, not %s", show(name), show(source))
		})
		return
	}
	b.speaks(source)
	if l.infra[name] {
		return
	}
	e, ok := l.clusters[name]
	switch {
	case !ok:
		b.refuse(entries, func() string {
			return fmt.Sprintf("cluster %s of source %s: not an engine cluster", show(name), source)
		})
		return
	case !s.Allows(e.Region):
		b.refuse(entries, func() string {
			return fmt.Sprintf("cluster %s of source %s: not an engine cluster the source may use (residency)", name, source)
		})
		return
	}
	bound := l.maxRate * iv.believed.Seconds()
	k := [2]string{source, name}
	for _, ls := range cs.GetUpstreamLocalityStats() {
		if n := ls.GetTotalIssuedRequests(); float64(n) > bound {
			b.refuse(1, func() string {
				return fmt.Sprintf("cluster %s locality %s: %d requests over %s: want at most %.6g (extproc.max_report_rate %g/s)",
					name, where(ls.GetLocality()), n, iv, bound, l.maxRate)
			})
			continue
		}
		b.observed[k] = addUint(b.observed[k], ls.GetTotalIssuedRequests())
	}
}

// show quotes a peer's string for a reason or a log line, at most
// maxShown bytes of it, with its length when it is longer.
func show(s string) string {
	if len(s) <= maxShown {
		return strconv.Quote(s)
	}
	cut := maxShown
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…(%d bytes)", strconv.Quote(s[:cut]), len(s))
}
