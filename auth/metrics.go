package auth

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Refusal reasons, the values of ilb_auth_refusals_total's reason label.
const (
	ReasonNoIdentity       = "no_identity"
	ReasonSourceNotAllowed = "source_not_allowed"
	ReasonUnknownSource    = "unknown_source"
	ReasonBadToken         = "bad_token"
)

type metrics struct {
	refusals   *prometheus.CounterVec
	reloads    *prometheus.CounterVec
	handshakes *prometheus.CounterVec
}

// newMetrics registers auth's metrics on reg (nil: kept, not exported).
// The label values that can occur under the configuration start at 0.
func newMetrics(reg *prometheus.Registry, a *Auth) (*metrics, error) {
	m := &metrics{
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_auth_refusals_total",
			Help: "Peers refused, by port (xds, lrs, extproc, admin) and reason (no_identity, source_not_allowed, unknown_source, bad_token).",
		}, []string{"port", "reason"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_tls_reloads_total",
			Help: "Reloads of the TLS files after they changed: ok, or error (the previous certificate stays in use).",
		}, []string{"result"}),
		handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ilb_tls_handshake_failures_total",
			Help: "TLS handshakes that failed, by port (xds: ADS and LRS, extproc, admin): no or an unverifiable client certificate, an old TLS version, not TLS at all. Connections closed before their first byte are not counted.",
		}, []string{"port"}),
	}
	if a.clientCerts {
		for _, p := range []Port{PortXDS, PortLRS, PortExtProc} {
			reasons := []string{ReasonNoIdentity, ReasonUnknownSource}
			if a.rules {
				reasons = append(reasons, ReasonSourceNotAllowed)
			}
			for _, r := range reasons {
				m.refusals.WithLabelValues(string(p), r)
			}
		}
	}
	if a.tokenPath != "" {
		m.refusals.WithLabelValues(string(PortAdmin), ReasonBadToken)
	}
	cs := []prometheus.Collector{m.refusals}
	if a.TLSEnabled() {
		m.reloads.WithLabelValues("ok")
		m.reloads.WithLabelValues("error")
		m.handshakes.WithLabelValues(string(PortXDS))
		m.handshakes.WithLabelValues(string(PortExtProc))
		if a.cfg.Security.Admin.TLS {
			m.handshakes.WithLabelValues(string(PortAdmin))
		}
		cs = append(cs, m.reloads, m.handshakes, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "ilb_tls_certificate_expiry_timestamp_seconds",
			Help: "When ILB's serving certificate expires (Unix time).",
		}, func() float64 { return float64(a.NotAfter().Unix()) }))
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("auth: metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) refused(p Port, reason string) { m.refusals.WithLabelValues(string(p), reason).Inc() }

func (m *metrics) reloaded(result string) { m.reloads.WithLabelValues(result).Inc() }
