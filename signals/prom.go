package signals

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Scrape results, the values of the result label.
const (
	resultOK           = "ok"
	resultProbeFailed  = "probe_failed"
	resultMetricsError = "metrics_error"
)

// promMetrics are the monitor's own metrics. Every label value comes from
// the configuration (cluster names) or a fixed set, so cardinality is
// bounded; replicas are not labels.
type promMetrics struct {
	scrapes   *prometheus.CounterVec
	duration  *prometheus.HistogramVec
	replicas  *prometheus.GaugeVec
	saturated *prometheus.GaugeVec
	capacity  *prometheus.GaugeVec
	waiting   *prometheus.GaugeVec
	running   *prometheus.GaugeVec
	kv        *prometheus.GaugeVec
	age       *prometheus.GaugeVec
	blind     prometheus.Gauge
}

// newPromMetrics creates the metrics and registers them on reg unless it
// is nil. clusters pre-creates every series so dashboards see zeros.
func newPromMetrics(reg *prometheus.Registry, clusters []string) (*promMetrics, error) {
	p := &promMetrics{
		scrapes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_signals_scrapes_total",
			Help: "Replica scrapes by cluster and result: ok (alive with usable metrics), probe_failed (health probe failed), metrics_error (alive, but the metrics could not be fetched, parsed or used).",
		}, []string{"cluster", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ilb_signals_scrape_duration_seconds",
			Help:    "Wall time of one replica scrape (health probe, then metrics), in seconds.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 10),
		}, []string{"cluster"}),
		replicas: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ilb_signals_replicas",
			Help: "Replicas per cluster and state (starting, warming, ready, draining, unhealthy, stale).",
		}, []string{"cluster", "state"}),
		saturated: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ilb_signals_cluster_saturated",
			Help: "1 when every serving replica of the cluster is saturated (queue or KV cache), else 0.",
		}, []string{"cluster"}),
		capacity: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ilb_signals_cluster_capacity",
			Help: "Capacity the controller plans with (token-cost units per second at 100% utilization): ready, stale and not-yet-probed replicas in full, warming ones by their ramp, times the profile's capacity_per_replica.",
		}, []string{"cluster"}),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ilb_signals_cluster_waiting",
			Help: "Requests waiting in the engines' queues, summed over the cluster's serving replicas with known metrics; absent when none's are known.",
		}, []string{"cluster"}),
		running: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ilb_signals_cluster_running",
			Help: "Requests running in the engines' batches, summed over the cluster's serving replicas with known metrics; absent when none's are known.",
		}, []string{"cluster"}),
		kv: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ilb_signals_cluster_kv_usage",
			Help: "Mean KV cache usage (0-1) of the cluster's serving replicas that report it; absent when none does (TGI).",
		}, []string{"cluster"}),
		age: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ilb_signals_cluster_age_seconds",
			Help: "Age of the oldest good scrape among the cluster's serving replicas when the snapshot was built (freshness of the cluster's signals); absent when one has never been scraped successfully.",
		}, []string{"cluster"}),
		blind: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ilb_signals_blind",
			Help: "1 while ILB takes itself for blind: health probes of more than signals.blind_fraction of the serving replicas, in two clusters or more, fail silently (time out) at once, or its scrape loop falls behind. Replicas failing silently keep their last known state and the controller fails static (blind).",
		}),
	}
	for _, c := range clusters {
		for _, r := range []string{resultOK, resultProbeFailed, resultMetricsError} {
			p.scrapes.WithLabelValues(c, r)
		}
		for _, s := range states {
			p.replicas.WithLabelValues(c, string(s))
		}
		p.saturated.WithLabelValues(c)
	}
	if reg == nil {
		return p, nil
	}
	for _, c := range []prometheus.Collector{p.scrapes, p.duration, p.replicas, p.saturated, p.capacity, p.waiting, p.running, p.kv, p.age, p.blind} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("signals metrics: %w", err)
		}
	}
	return p, nil
}

// observe updates the gauges from a snapshot; capacity is the
// controller's view of it (Snapshot.ClusterStates), per cluster.
func (p *promMetrics) observe(s *Snapshot, capacity map[string]float64) {
	if s.Blind != nil {
		p.blind.Set(1)
	} else {
		p.blind.Set(0)
	}
	for name, c := range s.Clusters {
		for _, st := range states {
			p.replicas.WithLabelValues(name, string(st)).Set(float64(c.count(st)))
		}
		v := 0.0
		if c.Saturated {
			v = 1
		}
		p.saturated.WithLabelValues(name).Set(v)
		p.capacity.WithLabelValues(name).Set(capacity[name])
		if c.LoadKnown > 0 {
			p.waiting.WithLabelValues(name).Set(c.Waiting)
			p.running.WithLabelValues(name).Set(c.Running)
		} else { // unknown is an absent series, never 0
			p.waiting.DeleteLabelValues(name)
			p.running.DeleteLabelValues(name)
		}
		if c.KVKnown {
			p.kv.WithLabelValues(name).Set(c.KVUsage)
		} else {
			p.kv.DeleteLabelValues(name)
		}
		if c.OldestScrape.IsZero() {
			p.age.DeleteLabelValues(name)
		} else {
			p.age.WithLabelValues(name).Set(s.At.Sub(c.OldestScrape).Seconds())
		}
	}
}

// count is the number of replicas in state s.
func (c Cluster) count(s State) int {
	switch s {
	case StateStarting:
		return c.Starting
	case StateWarming:
		return c.Warming
	case StateReady:
		return c.Ready
	case StateDraining:
		return c.Draining
	case StateUnhealthy:
		return c.Unhealthy
	case StateStale:
		return c.Stale
	}
	return 0
}

// discoveryStale exports ilb_signals_discovery_stale_seconds, computed at
// each scrape from the latest snapshot (a failing discovery with nothing
// else happening publishes no new snapshot, and the gauge must still
// grow: the alert waits on it).
type discoveryStale struct {
	desc     *prometheus.Desc
	clusters []string
	snapshot func() *Snapshot
	now      func() time.Time
}

var _ prometheus.Collector = (*discoveryStale)(nil)

func newDiscoveryStale(clusters []string, snapshot func() *Snapshot, now func() time.Time) *discoveryStale {
	return &discoveryStale{
		desc: prometheus.NewDesc("ilb_signals_discovery_stale_seconds",
			"How long the cluster's replica discovery has been failing (a DNS error, an unreadable file, a Kubernetes API server out of reach or refusing ILB): ILB keeps the replicas it last knew and never drains them for the silence. 0 while discovery works.",
			[]string{"cluster"}, nil),
		clusters: clusters, snapshot: snapshot, now: now,
	}
}

// Describe sends the one descriptor.
func (d *discoveryStale) Describe(ch chan<- *prometheus.Desc) { ch <- d.desc }

// Collect sends a sample per cluster.
func (d *discoveryStale) Collect(ch chan<- prometheus.Metric) {
	s, now := d.snapshot(), d.now()
	for _, name := range d.clusters {
		v := 0.0
		if c := s.Clusters[name]; c.DiscoveryError != "" {
			v = max(now.Sub(c.DiscoveryErrorSince).Seconds(), 0)
		}
		ch <- prometheus.MustNewConstMetric(d.desc, prometheus.GaugeValue, v, name)
	}
}
