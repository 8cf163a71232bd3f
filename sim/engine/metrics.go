package engine

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// vLLM metric names served at /metrics.
const (
	metricRunning      = "vllm:num_requests_running"
	metricWaiting      = "vllm:num_requests_waiting"
	metricKVUsage      = "vllm:kv_cache_usage_perc"
	metricPromptTokens = "vllm:prompt_tokens_total"
	metricGenTokens    = "vllm:generation_tokens_total"
	metricSuccess      = "vllm:request_success_total"
	metricTTFT         = "vllm:time_to_first_token_seconds"
)

// Finish reasons, as labels of vllm:request_success_total.
const (
	finishStop   = "stop"
	finishLength = "length"
	finishAbort  = "abort"
)

// metrics are a server's Prometheus metrics. Every metric has the constant
// label cluster (Options.Cluster) and the label model_name.
type metrics struct {
	promptTokens *prometheus.CounterVec   // model_name
	genTokens    *prometheus.CounterVec   // model_name
	success      *prometheus.CounterVec   // model_name, finished_reason
	ttft         *prometheus.HistogramVec // model_name
}

// newMetrics registers the metrics on reg. The load gauges are read from
// load at scrape time and labelled with the primary (first) model name, as
// vLLM labels everything with its first served model name; the counters are
// labelled with the model each request asked for and start at 0 for every
// model in models.
func newMetrics(reg prometheus.Registerer, cluster string, models []string, load func() Load) (*metrics, error) {
	reg = prometheus.WrapRegistererWith(prometheus.Labels{"cluster": cluster}, reg)
	m := &metrics{
		promptTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPromptTokens, Help: "Number of prefill tokens processed.",
		}, []string{"model_name"}),
		genTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricGenTokens, Help: "Number of generation tokens processed.",
		}, []string{"model_name"}),
		success: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricSuccess, Help: "Count of successfully processed requests.",
		}, []string{"model_name", "finished_reason"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: metricTTFT, Help: "Histogram of time to first token in seconds.",
			// vLLM's buckets.
			Buckets: []float64{
				0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
				1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
			},
		}, []string{"model_name"}),
	}
	lc := &loadCollector{
		load:    load,
		model:   models[0],
		running: prometheus.NewDesc(metricRunning, "Number of requests in model execution batches.", []string{"model_name"}, nil),
		waiting: prometheus.NewDesc(metricWaiting, "Number of requests waiting to be processed.", []string{"model_name"}, nil),
		kv:      prometheus.NewDesc(metricKVUsage, "KV-cache usage. 1 means 100 percent usage.", []string{"model_name"}, nil),
	}
	for _, c := range []prometheus.Collector{m.promptTokens, m.genTokens, m.success, m.ttft, lc} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("engine: register metrics: %w", err)
		}
	}
	for _, model := range models {
		m.promptTokens.WithLabelValues(model)
		m.genTokens.WithLabelValues(model)
		for _, r := range []string{finishStop, finishLength, finishAbort} {
			m.success.WithLabelValues(model, r)
		}
	}
	return m, nil
}

// loadCollector exports a Backend's Load as gauges, read once per scrape so
// that the three values are consistent.
type loadCollector struct {
	load                 func() Load
	model                string
	running, waiting, kv *prometheus.Desc
}

func (c *loadCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.running
	ch <- c.waiting
	ch <- c.kv
}

func (c *loadCollector) Collect(ch chan<- prometheus.Metric) {
	l := c.load()
	ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, float64(l.Running), c.model)
	ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(l.Waiting), c.model)
	ch <- prometheus.MustNewConstMetric(c.kv, prometheus.GaugeValue, l.KVCacheUsage, c.model)
}

// genTracker accounts the choices of one generation request in the
// metrics: each choice counts as one vLLM request. It is used by the
// request's handler goroutine only.
type genTracker struct {
	m       *metrics
	now     func() time.Time
	model   string
	start   time.Time
	prompts []int // prompt tokens per choice
	counts  []int // tokens received per choice
	want    int   // tokens wanted per choice

	finished bool
}

func newGenTracker(m *metrics, now func() time.Time, job genJob) *genTracker {
	return &genTracker{
		m: m, now: now, model: job.model, start: now(),
		prompts: job.prompts, counts: make([]int, len(job.prompts)), want: job.maxTokens,
	}
}

// token records one token of choice i; the first one completes its prefill.
func (t *genTracker) token(i int) {
	if t.counts[i] == 0 {
		t.m.ttft.WithLabelValues(t.model).Observe(t.now().Sub(t.start).Seconds())
		t.m.promptTokens.WithLabelValues(t.model).Add(float64(t.prompts[i]))
	}
	t.counts[i]++
	t.m.genTokens.WithLabelValues(t.model).Inc()
}

// complete reports whether every choice received all its tokens.
func (t *genTracker) complete() bool {
	for _, n := range t.counts {
		if n < t.want {
			return false
		}
	}
	return true
}

// finish counts every choice as finished by length, or aborted; only its
// first call counts.
func (t *genTracker) finish() {
	if t.finished {
		return
	}
	t.finished = true
	for _, n := range t.counts {
		reason := finishLength
		if n < t.want {
			reason = finishAbort
		}
		t.m.success.WithLabelValues(t.model, reason).Inc()
	}
}

// usage is the request's token usage.
func (t *genTracker) usage() *usage {
	u := &usage{}
	for i, n := range t.counts {
		u.PromptTokens += t.prompts[i]
		u.CompletionTokens += n
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}
