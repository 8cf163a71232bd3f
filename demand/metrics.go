package demand

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// StatusSource is what the collector reads: the aggregator's counts.
type StatusSource interface {
	Status() Status
}

var _ StatusSource = (*Aggregator)(nil)

// Collector exports the measured demand as Prometheus metrics, read from
// the aggregator at each scrape (no state of its own):
//
//	ilb_demand_requests_total{source,model,priority}    requests metered (routed and shed)
//	ilb_demand_shed_total{source,model,priority}        of which shed or refused
//	ilb_demand_token_cost_total{source,model,priority}  their estimated token-cost units
//	ilb_demand_reports_total                            demand reports received
//	ilb_demand_dropped_total                            report entries refused (bad, implausible or unknown)
//	ilb_demand_reporters                                reporters alive
//	ilb_demand_reporters_expired_total                  reporters forgotten for their silence
//	ilb_demand_oldest_report_age_seconds                age of the least recent reporter's last report
//
// Label values come from the configuration (sources, models) and the
// three priorities. Safe for concurrent use.
type Collector struct {
	src StatusSource
	now func() time.Time

	requests, shed, cost, reports, dropped, reporters, expired, age *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector over src; now is the clock of the
// report ages (nil: time.Now).
func NewCollector(src StatusSource, now func() time.Time) *Collector {
	if now == nil {
		now = time.Now
	}
	stream := []string{"source", "model", "priority"}
	return &Collector{
		src: src, now: now,
		requests:  prometheus.NewDesc("ilb_demand_requests_total", "Requests ext_proc metered as demand (routed and shed), by source, model and priority, as reported to the controller.", stream, nil),
		shed:      prometheus.NewDesc("ilb_demand_shed_total", "Of the metered requests, those shed or refused for capacity (429 shed/overloaded, 503 no_capacity).", stream, nil),
		cost:      prometheus.NewDesc("ilb_demand_token_cost_total", "Estimated token-cost units of the metered requests (prompt and output tokens, capped by the model's limits, weighted by its token costs): what was booked at decision, plus what was confirmed when an engine accepted the request.", stream, nil),
		reports:   prometheus.NewDesc("ilb_demand_reports_total", "Demand reports received from reporters (in process or over LRS).", nil, nil),
		dropped:   prometheus.NewDesc("ilb_demand_dropped_total", "Report entries refused: NaN, infinite, negative or implausible values (over extproc.max_report_rate), unknown sources, models, priorities, clusters or nodes.", nil, nil),
		reporters: prometheus.NewDesc("ilb_demand_reporters", "Demand reporters alive (ext_proc instances).", nil, nil),
		expired:   prometheus.NewDesc("ilb_demand_reporters_expired_total", "Demand reporters forgotten after staying silent for three report intervals.", nil, nil),
		age:       prometheus.NewDesc("ilb_demand_oldest_report_age_seconds", "Seconds since the least recent live reporter's last report, or, when every reporter is gone, since the last report of any; the controller goes fail-static (stale_demand) when it grows past controller.stale_after. Absent before the first report.", nil, nil),
	}
}

// Describe sends the descriptors.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.requests, c.shed, c.cost, c.reports, c.dropped, c.reporters, c.expired, c.age} {
		ch <- d
	}
}

// Collect reads the aggregator's status.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.src.Status()
	for _, t := range st.Totals {
		l := []string{t.Source, t.Model, t.Priority.String()}
		ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(t.Requests), l...)
		ch <- prometheus.MustNewConstMetric(c.shed, prometheus.CounterValue, float64(t.Shed), l...)
		ch <- prometheus.MustNewConstMetric(c.cost, prometheus.CounterValue, t.TokenCost, l...)
	}
	ch <- prometheus.MustNewConstMetric(c.reports, prometheus.CounterValue, float64(st.Reports))
	ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(st.Dropped))
	ch <- prometheus.MustNewConstMetric(c.reporters, prometheus.GaugeValue, float64(len(st.Reporters)))
	ch <- prometheus.MustNewConstMetric(c.expired, prometheus.CounterValue, float64(st.Expired))
	var oldest time.Time
	for _, r := range st.Reporters {
		if !r.LastReport.IsZero() && (oldest.IsZero() || r.LastReport.Before(oldest)) {
			oldest = r.LastReport
		}
	}
	if len(st.Reporters) == 0 {
		oldest = st.LastReport // every reporter gone: what the controller judges
	}
	if !oldest.IsZero() {
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, c.now().Sub(oldest).Seconds())
	}
}
