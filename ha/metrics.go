package ha

import (
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of a publication and of an install (label values).
var (
	publishOutcomes = []string{"published", "fenced", "failed"}
	installOutcomes = []string{"installed", "refused", "failed"}
)

type metrics struct {
	leader    prometheus.Gauge
	reachable prometheus.Gauge
	mismatch  prometheus.Gauge
	terms     prometheus.Counter
	publishes *prometheus.CounterVec
	installs  *prometheus.CounterVec
	refused   prometheus.Counter
}

// newMetrics creates the metrics; the age gauges read r at each scrape.
// reg nil: nothing is registered.
func newMetrics(reg *prometheus.Registry, r *Replica) (*metrics, error) {
	m := &metrics{
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ilb_ha_leader",
			Help: "1 while this replica leads (runs the controller and publishes weights), else 0.",
		}),
		reachable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ilb_ha_etcd_reachable",
			Help: "1 when the HA backend answered this replica's last check (etcd: a linearizable read, a quorum answered; Kubernetes: the API server read the Lease), 0 when it did not: the replica serves its last installed weights (fail static).",
		}),
		mismatch: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ilb_ha_config_mismatch",
			Help: "1 when the version in force was published by a leader whose configuration (regions, network, sources, models, profiles, clusters, controller) differs from this replica's.",
		}),
		terms: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ilb_ha_elections_won_total",
			Help: "Times this replica was elected leader.",
		}),
		publishes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_ha_publishes_total",
			Help: "Weights versions this replica tried to publish as leader, by outcome: published, fenced (its term had ended: refused by the backend, or by the replica that noticed first), failed (the backend unreachable, or the version could not be encoded).",
		}, []string{"outcome"}),
		installs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_ha_installs_total",
			Help: "Published versions this replica tried to serve, by outcome: installed, refused (content that does not match its version, or a sink rejected it), failed (the backend could not be read).",
		}, []string{"outcome"}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ilb_ha_demand_refused_total",
			Help: "Demand shares or streams read from the backend and left out of the sum: undecodable, or naming unknown sources, models or priorities, or non-finite or negative rates.",
		}),
	}
	for _, o := range publishOutcomes {
		m.publishes.WithLabelValues(o)
	}
	for _, o := range installOutcomes {
		m.installs.WithLabelValues(o)
	}
	if reg == nil {
		return m, nil
	}
	age := func(at func() time.Time) func() float64 {
		return func() float64 {
			t := at()
			if t.IsZero() {
				return math.NaN()
			}
			return r.now().Sub(t).Seconds()
		}
	}
	cs := []prometheus.Collector{
		m.leader, m.reachable, m.mismatch, m.terms, m.publishes, m.installs, m.refused,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ilb_ha_replicas",
			Help: "Replicas whose demand share this replica counts: live in the backend (etcd: on a live lease; Kubernetes: changed within the lease duration) and measured within controller.stale_after, itself included once it has written one.",
		}, func() float64 { return float64(r.shareCount()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ilb_ha_etcd_contact_age_seconds",
			Help: "Seconds since the HA backend (etcd, or the Kubernetes API server) last answered this replica's check; NaN before the first answer.",
		}, age(r.lastContact)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ilb_ha_published_age_seconds",
			Help: "Seconds since the newest version this replica saw in the backend was published (the leader's clock); NaN before it saw one.",
		}, age(func() time.Time { return r.seenRecord().Published })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ilb_ha_installed_age_seconds",
			Help: "Seconds since the version this replica serves was published (the leader's clock); NaN while it serves none from the backend (a local first version). Above ilb_ha_published_age_seconds: the newest version is not installed.",
		}, age(func() time.Time { return r.installedRecord().Published })),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("ha metrics: %w", err)
		}
	}
	return m, nil
}
