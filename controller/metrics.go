package controller

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type controllerMetrics struct {
	ticks   *prometheus.CounterVec
	solve   prometheus.Histogram
	reasons *prometheus.GaugeVec
}

func newControllerMetrics(reg *prometheus.Registry) (*controllerMetrics, error) {
	m := &controllerMetrics{
		ticks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_controller_ticks_total",
			Help: "Controller ticks by result: published (a new version reached every sink), unchanged (same version), failed (fail-static: kept the last good version); triggered counts the extra ticks asked for by a change of cluster health.",
		}, []string{"result"}),
		solve: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ilb_controller_solve_seconds",
			Help:    "Time the policy took to compute the weights of one tick.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		reasons: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ilb_controller_fail_static",
			Help: "1 for the reason the controller is keeping its last good weights (stale_state, stale_demand, demand_jump, capacity_drop, bad_input, solver_error, rejected, blind); all 0 when the weights are fresh.",
		}, []string{"reason"}),
	}
	for _, r := range failStaticReasons {
		m.reasons.WithLabelValues(r).Set(0)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.ticks, m.solve, m.reasons} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("controller metrics: %w", err)
			}
		}
	}
	return m, nil
}

// failStatic sets the gauge of reason to 1 and every other to 0 ("" for
// none).
func (m *controllerMetrics) failStatic(reason string) {
	for _, r := range failStaticReasons {
		v := 0.0
		if r == reason {
			v = 1
		}
		m.reasons.WithLabelValues(r).Set(v)
	}
}
