package extproc

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
)

// firstEvent calibrates the first-token predictions of the cluster x
// went to with x's first server-sent event, once: the engine sends it
// with the first token (vLLM and SGLang send their response headers
// before, as their streaming response starts, so the headers say
// nothing of it). The time the engine took is the time since the
// decision less the round trip there; route.Calibration bounds what one
// observation can do.
func (s *Server) firstEvent(x *exchange) {
	if !(x.firstToken > 0) || x.calib == nil {
		return
	}
	actual := s.opts.Now().Sub(x.decidedAt).Seconds() - x.rtt
	x.calib.Observe(x.firstToken, max(actual, 0), s.opts.Config.Controller.Capacity.TTFTTarget.Std().Seconds())
	x.firstToken = 0
}

// scaleCollector exports each engine cluster's calibration of first-token
// predictions (ilb_extproc_first_token_scale): one gauge per configured
// cluster, read when scraped.
type scaleCollector struct {
	desc     *prometheus.Desc
	names    []string // sorted
	awaiting map[string]*inflight
}

var _ prometheus.Collector = (*scaleCollector)(nil)

func newScaleCollector(awaiting map[string]*inflight) *scaleCollector {
	names := make([]string, 0, len(awaiting))
	for n := range awaiting {
		names = append(names, n)
	}
	slices.Sort(names)
	return &scaleCollector{
		desc: prometheus.NewDesc("ilb_extproc_first_token_scale",
			"How far the first tokens of an engine cluster's followed streaming responses came below ILB's prediction of them (its wait there plus the prompt's prefill, an upper bound): the 0.9 quantile of actual ÷ predicted over the requests predicted past the TTFT target, in [0.125, 1], 1 until such first tokens are seen. The planned shed refuses only a request whose prediction times it is past the TTFT target.",
			[]string{"cluster"}, nil),
		names: names, awaiting: awaiting,
	}
}

// Describe implements prometheus.Collector.
func (c *scaleCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *scaleCollector) Collect(ch chan<- prometheus.Metric) {
	for _, n := range c.names {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, c.awaiting[n].calib.Scale(), n)
	}
}
