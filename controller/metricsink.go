package controller

import (
	"context"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/weights"
)

// MetricsSink exports every published weights version as Prometheus
// gauges: the weight share of each (source, model, cluster), the shed
// fraction of each (source, model, priority), each cell's planned demand
// and served load, and each cluster's planned load. Series of a cell or
// target that a new version drops are deleted, so the gauges always
// describe the version in force. Label values come from the configuration
// (sources, models, clusters) and the three priorities: cardinality is
// bounded by sources × models × clusters. Safe for concurrent use.
type MetricsSink struct {
	mu        sync.Mutex
	share     *prometheus.GaugeVec
	shed      *prometheus.GaugeVec
	demand    *prometheus.GaugeVec
	served    *prometheus.GaugeVec
	load      *prometheus.GaugeVec
	published prometheus.Gauge
	clusters  map[string]bool // clusters with a planned-load series
}

var _ Sink = (*MetricsSink)(nil)

// NewMetricsSink creates the gauges and registers them on reg (nil: not
// registered, for tests).
func NewMetricsSink(reg *prometheus.Registry) (*MetricsSink, error) {
	m := &MetricsSink{
		share: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ilb_weights_share",
			Help: "Share (0-1) of a (source, model) cell's traffic the weights in force give an engine cluster; absent when the cluster gets none.",
		}, []string{"source", "model", "cluster"}),
		shed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ilb_weights_shed_fraction",
			Help: "Fraction (0-1) of a (source, model) cell's requests of a priority that the weights in force shed (ext_proc answers 429).",
		}, []string{"source", "model", "priority"}),
		demand: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ilb_weights_demand",
			Help: "Demand (token-cost units per second, smoothed) the weights in force were planned for, per (source, model) cell.",
		}, []string{"source", "model"}),
		served: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ilb_weights_served",
			Help: "Part of a cell's planned demand routed to clusters (token-cost units per second): demand minus what is shed.",
		}, []string{"source", "model"}),
		load: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ilb_weights_planned_load",
			Help: "Load (token-cost units per second) the weights in force send to an engine cluster: the sum over cells of served load × share. Divide by ilb_signals_cluster_capacity for the planned utilization.",
		}, []string{"cluster"}),
		published: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ilb_weights_computed_timestamp_seconds",
			Help: "When the weights in force were computed (Unix seconds).",
		}),
		clusters: map[string]bool{},
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.share, m.shed, m.demand, m.served, m.load, m.published} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("weights metrics: %w", err)
			}
		}
	}
	return m, nil
}

var _ refresher = (*MetricsSink)(nil)

// Refresh exports w, the same routing as the version in force with a new
// tick's demand and planned load.
func (m *MetricsSink) Refresh(w *weights.Weights) { m.set(w) }

// Prepare returns a commit that exports w; it never fails.
func (m *MetricsSink) Prepare(_ context.Context, w *weights.Weights) (func(), error) {
	return func() { m.set(w) }, nil
}

// set replaces the exported series with w's.
func (m *MetricsSink) set(w *weights.Weights) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.share.Reset()
	m.shed.Reset()
	m.demand.Reset()
	m.served.Reset()
	load := map[string]float64{}
	for c := range w.All() {
		for _, t := range c.Targets {
			s := float64(t.Weight) / weights.Total
			m.share.WithLabelValues(c.Source, c.Model, t.Cluster).Set(s)
			load[t.Cluster] += c.Served * s
		}
		for _, p := range weights.Priorities {
			m.shed.WithLabelValues(c.Source, c.Model, p.String()).Set(c.Shed[p])
		}
		m.demand.WithLabelValues(c.Source, c.Model).Set(c.Demand)
		m.served.WithLabelValues(c.Source, c.Model).Set(c.Served)
	}
	for cl := range m.clusters {
		if _, ok := load[cl]; !ok {
			m.load.WithLabelValues(cl).Set(0)
		}
	}
	for cl, v := range load {
		m.load.WithLabelValues(cl).Set(v)
		m.clusters[cl] = true
	}
	m.published.Set(float64(w.Computed().UnixNano()) / 1e9)
}
