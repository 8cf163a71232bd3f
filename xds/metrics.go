package xds

import (
	"fmt"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/config"
)

// metrics are the xDS server's Prometheus series (docs/metrics.md, xDS).
type metrics struct {
	streams    prometheus.Gauge
	acks       *prometheus.CounterVec
	nacks      *prometheus.CounterVec
	publish    prometheus.Counter
	rollbacks  *prometheus.CounterVec
	promotions *prometheus.CounterVec
	rejected   *prometheus.GaugeVec
	canary     *prometheus.GaugeVec
	nodes      *prometheus.GaugeVec
	held       *prometheus.GaugeVec
	forgotten  prometheus.Counter
	edsPushes  *prometheus.CounterVec
}

func newMetrics(c *config.Config, reg *prometheus.Registry) (*metrics, error) {
	m := &metrics{
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ilb_xds_streams", Help: "Open xDS streams (state of the world and delta).",
		}),
		acks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_xds_acks_total", Help: "xDS responses acknowledged by Envoys, by resource type.",
		}, []string{"type"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_xds_nacks_total", Help: "xDS responses rejected by Envoys, by resource type.",
		}, []string{"type"}),
		publish: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ilb_xds_snapshots_published_total", Help: "Weights versions turned into snapshots for every source.",
		}),
		rollbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_xds_rollbacks_total", Help: "Versions banned for a source while in force and rolled back: a canary's rejection (canaries back to stable) or a quorum of its Envoys (the source back to its last acknowledged snapshot).",
		}, []string{"source"}),
		promotions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_xds_canary_promotions_total", Help: "Canary versions promoted to every Envoy of a source.",
		}, []string{"source"}),
		rejected: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ilb_xds_rejected_versions", Help: "Versions (per type) banned for a source, by a canary or a quorum of its Envoys: never sent again.",
		}, []string{"source"}),
		canary: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ilb_xds_canary_pending", Help: "1 while a source's canaries run a version its other Envoys do not have yet.",
		}, []string{"source"}),
		nodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ilb_xds_nodes", Help: "Envoys known per source: connected, or gone for less than envoy.rollout.node_ttl.",
		}, []string{"source"}),
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ilb_xds_nodes_held", Help: "Connected Envoys of a source that rejected a version in force, below the ban quorum: they keep their last accepted version and get nothing new until the content changes.",
		}, []string{"source"}),
		forgotten: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ilb_xds_nodes_forgotten_total", Help: "Envoys forgotten envoy.rollout.node_ttl after their last xDS stream closed, or as the longest gone past 1,024 departed Envoys.",
		}),
		edsPushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_xds_endpoint_pushes_total", Help: "Endpoint (EDS) changes pushed to every source: how=at_once (it took traffic away from a replica, or none was pushed for envoy.eds_min_interval) or batched (held for envoy.eds_min_interval with those that came after it).",
		}, []string{"how"}),
	}
	// Every series exists from the start at zero, so that increase() and
	// rate() see the first NACK or rollback (a series born at 1 has no
	// increase).
	for _, s := range c.Sources {
		m.rejected.WithLabelValues(s.Name).Set(0)
		m.canary.WithLabelValues(s.Name).Set(0)
		m.nodes.WithLabelValues(s.Name).Set(0)
		m.held.WithLabelValues(s.Name).Set(0)
		m.rollbacks.WithLabelValues(s.Name)
		m.promotions.WithLabelValues(s.Name)
	}
	for _, typ := range []resource.Type{resource.ClusterType, resource.EndpointType, resource.RouteType, resource.ListenerType, ""} {
		m.acks.WithLabelValues(shortType(typ))
		m.nacks.WithLabelValues(shortType(typ))
	}
	m.edsPushes.WithLabelValues("at_once")
	m.edsPushes.WithLabelValues("batched")
	if reg != nil {
		for _, c := range []prometheus.Collector{
			m.streams, m.acks, m.nacks, m.publish, m.rollbacks, m.promotions, m.rejected, m.canary,
			m.nodes, m.held, m.forgotten, m.edsPushes,
		} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("xds metrics: %w", err)
			}
		}
	}
	return m, nil
}
