package app

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/capacity"
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/signals"
)

// newEstimator starts every cluster's capacity at its profile and exports
// the estimates as gauges read at each scrape.
func newEstimator(c *config.Config, reg *prometheus.Registry) (*capacity.Estimator, error) {
	est, err := capacity.NewFromConfig(c)
	if err != nil {
		return nil, fmt.Errorf("app: %w", err)
	}
	if reg != nil {
		if err := reg.Register(capacityCollector{est}); err != nil {
			return nil, fmt.Errorf("app: capacity metrics: %w", err)
		}
	}
	return est, nil
}

// observeCapacity gives the estimator one interval of every cluster: sums
// over its serving replicas whose load and token rates are known. A blind
// monitor's held states are not evidence.
func (a *App) observeCapacity(snap *signals.Snapshot) {
	if a.Capacity == nil || snap.Blind != nil {
		return
	}
	for name, c := range snap.Clusters {
		a.Capacity.Observe(name, c.Observation(snap.At))
	}
}

// capacityCollector exports the estimates at each scrape.
type capacityCollector struct{ est *capacity.Estimator }

var _ prometheus.Collector = capacityCollector{}

var (
	capacityPerReplica = prometheus.NewDesc("ilb_capacity_per_replica",
		"Capacity per replica the controller plans with (token-cost units per second at full utilization): learned from the engines, the profile being the prior.", []string{"cluster"}, nil)
	capacitySaturation = prometheus.NewDesc("ilb_capacity_saturation_per_replica",
		"Learned throughput per replica at saturation (token-cost units per second): measured while a request waits per replica; the plan sheds against it less the backlog served within a tick.", []string{"cluster"}, nil)
	capacityBacklog = prometheus.NewDesc("ilb_capacity_backlog_per_replica",
		"Work waiting per replica (token-cost units): the queue per replica over the estimator's window times its mean cost of a request; served within a controller tick, it lowers the capacity under overload and the saturation throughput the plan sheds against.", []string{"cluster"}, nil)
	capacityPrior = prometheus.NewDesc("ilb_capacity_prior_per_replica",
		"The configured capacity_per_replica of the cluster's profile (token-cost units per second).", []string{"cluster"}, nil)
	capacityConfidence = prometheus.NewDesc("ilb_capacity_confidence",
		"Share of the learned capacity that rests on measurements rather than the prior, in [0, 1].", []string{"cluster"}, nil)
)

func (capacityCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{capacityPerReplica, capacitySaturation, capacityBacklog, capacityPrior, capacityConfidence} {
		ch <- d
	}
}

func (c capacityCollector) Collect(ch chan<- prometheus.Metric) {
	for _, e := range c.est.Estimates() {
		ch <- prometheus.MustNewConstMetric(capacityPerReplica, prometheus.GaugeValue, e.PerReplica, e.Cluster)
		ch <- prometheus.MustNewConstMetric(capacitySaturation, prometheus.GaugeValue, e.Saturation, e.Cluster)
		ch <- prometheus.MustNewConstMetric(capacityBacklog, prometheus.GaugeValue, e.Backlog, e.Cluster)
		ch <- prometheus.MustNewConstMetric(capacityPrior, prometheus.GaugeValue, e.Prior, e.Cluster)
		ch <- prometheus.MustNewConstMetric(capacityConfidence, prometheus.GaugeValue, e.Confidence, e.Cluster)
	}
}
