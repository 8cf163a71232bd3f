package extproc

import (
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/decision"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/live"
	"github.com/ilbproject/ilb/openai"
	"github.com/ilbproject/ilb/picker"
)

// replicaPicker is a cluster's replica picker and its metrics' counters,
// resolved once.
type replicaPicker struct {
	*picker.Cluster
	picks                 map[string]prometheus.Counter // by reason
	prompt, cached        prometheus.Counter
	servedChosen, servedX prometheus.Counter
}

// reasonSkipped: no live replica state, Envoy's least request chose.
const reasonSkipped = "skipped"

// skippedNoLive is the replica decision of every request ILB left to
// Envoy for want of live replica state: one value, shared by the records
// and never changed (a record's copy-on-write leaves it alone).
var skippedNoLive = &decision.ReplicaDecision{Skipped: "no live replica state for the cluster: Envoy's least request chooses"}

// skippedNoneServing: every replica listed is draining or unhealthy.
var skippedNoneServing = &decision.ReplicaDecision{Skipped: "no serving replica in the live state: Envoy's least request chooses among what it has"}

// candidateBufs holds the candidate lists of replica picking: a list
// lives for one Pick (the picker keeps none of it), and on the stack it
// took a kilobyte of every request's goroutine, whose stack then grew.
var candidateBufs = sync.Pool{New: func() any { b := make([]picker.Replica, 0, 16); return &b }}

// newPickers makes one replica picker per cluster with replica picking
// on. They live as long as the server: what they learned survives
// weights versions.
func newPickers(c *config.Config, m *metrics) map[string]*replicaPicker {
	out := map[string]*replicaPicker{}
	for _, e := range c.Clusters {
		if !e.ReplicaPicking.Enabled {
			continue
		}
		p := &replicaPicker{
			Cluster: picker.NewCluster(picker.Options{CacheTokens: e.ReplicaPicking.CacheTokensOrDefault(), MaxQueueSkew: e.ReplicaPicking.MaxQueueSkew, MaxCPULoras: e.ReplicaPicking.MaxCPULoras}),
			picks:   map[string]prometheus.Counter{},
			prompt:  m.replicaPrompt.WithLabelValues(e.Name), cached: m.replicaCached.WithLabelValues(e.Name),
			servedChosen: m.replicaServed.WithLabelValues(e.Name, "chosen"), servedX: m.replicaServed.WithLabelValues(e.Name, "other"),
		}
		for _, r := range []string{picker.ReasonPrefix, picker.ReasonSession, picker.ReasonLoad, picker.ReasonOnly, reasonSkipped} {
			p.picks[r] = m.replicaPicks.WithLabelValues(e.Name, r)
		}
		out[e.Name] = p
	}
	return out
}

// pickReplica chooses the replica of the chosen cluster when it picks
// replicas, books the request there (x.ticket) and gives the answer its
// override-host list (none when Envoy chooses). body is nil when ILB
// decided on headers alone: then the prompt's length is estimated from
// the request's Content-Length (as x.cost's is) and the session key, if
// any, stands for its prefix. session is the session key's hash (0:
// none); it also orders ties, so a session's requests agree on them.
func (s *Server) pickReplica(x *exchange, body *openai.Body, model string, ls *live.State, session uint64) {
	cluster := x.rec.Chosen
	pk := s.pickers[cluster]
	if pk == nil {
		return
	}
	var cl live.Cluster
	if ls != nil {
		cl = ls.Clusters[cluster]
	}
	if len(cl.Replicas) == 0 {
		x.rec.Replica = skippedNoLive // shared, never changed
		pk.picks[reasonSkipped].Inc()
		return
	}
	buf := candidateBufs.Get().(*[]picker.Replica)
	defer candidateBufs.Put(buf)
	cands := cl.Candidates((*buf)[:0])
	*buf = cands[:0] // keep what it grew to
	if len(cands) == 0 {
		x.rec.Replica = skippedNoneServing
		pk.picks[reasonSkipped].Inc()
		return
	}
	lim := x.st.limits[model]
	p := live.Prompt{Session: session, Adapter: x.rec.Adapter}
	if body != nil {
		p.Read, p.MaxTokens, p.Tokens = true, body.MaxTokens, body.PromptTokens
		if n := len(body.Prompt) / picker.BlockBytes; n > 0 {
			// An engine caches an adapter's prefixes apart from the base
			// model's (vLLM's block hashes include the LoRA id).
			seed := model
			if x.rec.Adapter != "" {
				seed = x.rec.Adapter
			}
			p.Blocks = picker.AppendBlocks(make([]uint64, 0, picker.Hashes(n)), picker.Seed(seed), body.Prompt)
		}
	} else {
		// The prompt was not read: its length is estimated from the
		// Content-Length as x.cost's is (0 without one), and the session
		// key stands for its prefix.
		t, _ := promptTokens(lim, &x.h, nil)
		p.Tokens = int(t)
	}
	req := live.PickerRequest(lim.Model, s.opts.Config.ExtProc, p, s.opts.Rand)
	pr := new(pickRecord)
	x.pick = pr
	rd := &pr.decision
	x.rec.Replica = rd
	d, t := pk.PickInto(cands, req, pr.hosts[:0])
	x.ticket = t
	rd.Chosen, rd.Hosts, rd.Reason, rd.PromptBlocks, rd.Terms = d.Chosen.Address, d.Hosts, d.Reason, len(req.Blocks), d.Chosen
	if d.RunnerUp.Address != "" {
		pr.runnerUp = d.RunnerUp
		rd.RunnerUp, rd.Lost = &pr.runnerUp, d.Lost()
	}
	pk.picks[d.Reason].Inc()
	pk.prompt.Add(float64(req.PromptTokens))
	pk.cached.Add(float64(d.Chosen.Cached))
	if len(d.Hosts) > 0 {
		x.answer.setHosts(d.Hosts)
	}
}

// pickRecord is a replica decision with the memory of its runner-up, its
// host list and the copy the response writes on (which replica served):
// one allocation for the four. The decision is shared with the log once
// recorded: never changed after (records copy it on write; the copies
// still point into this one).
type pickRecord struct {
	decision decision.ReplicaDecision
	runnerUp picker.Term
	hosts    [picker.MaxHosts]string
	served   decision.ReplicaDecision
}

// copyOf returns a copy of d to write on: in p's memory when d is p's
// decision (the first copy of a record's), else a new one (p nil, or d
// a copy already: the record shares it with the log by now).
func (p *pickRecord) copyOf(d *decision.ReplicaDecision) *decision.ReplicaDecision {
	if p == nil || d != &p.decision {
		c := *d
		return &c
	}
	p.served = *d
	return &p.served
}

// replicaServed notes, from the response, which replica served.
func (s *Server) replicaServed(r *decision.Record) {
	rd := r.Replica
	if rd == nil || rd.Chosen == "" || r.UpstreamHost == "" {
		return
	}
	pk := s.pickers[r.Chosen]
	if pk == nil {
		return
	}
	rd.Served = "other"
	c := pk.servedX
	if r.UpstreamHost == rd.Chosen {
		rd.Served, c = "chosen", pk.servedChosen
	}
	c.Inc()
}

// servedHost is the host Envoy's override_host policy selected, from the
// metadata the ext_proc filter forwards (envoy.lb namespace); "" when
// absent.
func servedHost(md *corev3.Metadata) string {
	return md.GetFilterMetadata()[header.LBNamespace].GetFields()[header.DestinationEndpointServed].GetStringValue()
}

// pickerCollector exports the pickers' index sizes.
type pickerCollector struct {
	pickers map[string]*replicaPicker
	bytes   *prometheus.Desc
	blocks  *prometheus.Desc
}

var _ prometheus.Collector = (*pickerCollector)(nil)

func newPickerCollector(p map[string]*replicaPicker) *pickerCollector {
	return &pickerCollector{
		pickers: p,
		bytes:   prometheus.NewDesc("ilb_extproc_replica_index_bytes", "Estimated memory of ILB's prefix-cache index of a cluster's replicas (replica picking).", []string{"cluster"}, nil),
		blocks:  prometheus.NewDesc("ilb_extproc_replica_index_blocks", "Prompt blocks (256 bytes, ~64 tokens) ILB believes a cluster's replicas hold in their prefix caches, all replicas.", []string{"cluster"}, nil),
	}
}

func (c *pickerCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.bytes; ch <- c.blocks }

func (c *pickerCollector) Collect(ch chan<- prometheus.Metric) {
	for name, p := range c.pickers {
		st := p.Stats()
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(st.Bytes), name)
		ch <- prometheus.MustNewConstMetric(c.blocks, prometheus.GaugeValue, float64(st.Blocks), name)
	}
}
