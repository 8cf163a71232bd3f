package engine

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// vLLM metric names served at /metrics (the default dialect).
const (
	metricRunning      = "vllm:num_requests_running"
	metricWaiting      = "vllm:num_requests_waiting"
	metricKVUsage      = "vllm:kv_cache_usage_perc"
	metricPromptTokens = "vllm:prompt_tokens_total"
	metricGenTokens    = "vllm:generation_tokens_total"
	metricSuccess      = "vllm:request_success_total"
	metricTTFT         = "vllm:time_to_first_token_seconds"
	metricLoRAInfo     = "vllm:lora_requests_info"
)

// loraHistory is how many label combinations of vllm:lora_requests_info
// a replica keeps exporting (see loraCollector).
const loraHistory = 64

// Finish reasons, as labels of vllm:request_success_total.
const (
	finishStop   = "stop"
	finishLength = "length"
	finishAbort  = "abort"
)

// dialect is the metric vocabulary of one engine kind, as that engine
// names its series (the sources are cited in signals/mapping_builtin.go,
// which reads them): load gauges, token counters (or, for TGI, per-request
// token histograms whose _sum series count tokens), a TTFT histogram, a
// finished-request counter, and the model label. "" means the engine
// exports no such series.
type dialect struct {
	running, waiting, kv string
	prompt, gen          string
	tokenHistograms      bool
	ttft, success        string
	modelLabel           string
	loraInfo             string // vLLM's LoRA info gauge
}

// Dialects are the engine kinds a simulated replica can speak: the names
// of config.EngineKind.
var dialects = map[string]dialect{
	"vllm": {
		running: metricRunning, waiting: metricWaiting, kv: metricKVUsage,
		prompt: metricPromptTokens, gen: metricGenTokens, ttft: metricTTFT, success: metricSuccess, modelLabel: "model_name",
		loraInfo: metricLoRAInfo,
	},
	"sglang": {
		running: "sglang:num_running_reqs", waiting: "sglang:num_queue_reqs", kv: "sglang:token_usage",
		prompt: "sglang:prompt_tokens_total", gen: "sglang:generation_tokens_total", ttft: "sglang:time_to_first_token_seconds",
		modelLabel: "model_name",
	},
	"tgi": {
		running: "tgi_batch_current_size", waiting: "tgi_queue_size",
		prompt: "tgi_request_input_length", gen: "tgi_request_generated_tokens", tokenHistograms: true,
	},
	"trtllm": { // trtllm-serve
		running: "trtllm_num_requests_running", waiting: "trtllm_num_requests_waiting", kv: "trtllm_kv_cache_utilization",
		prompt: "trtllm_prompt_tokens_total", gen: "trtllm_generation_tokens_total", ttft: "trtllm_time_to_first_token_seconds",
		modelLabel: "model_name",
	},
}

// Kinds lists the engine kinds a simulated replica can speak.
func Kinds() []string { return slices.Sorted(maps.Keys(dialects)) }

// ttftBuckets are vLLM's (and trtllm-serve's) time-to-first-token bounds.
var ttftBuckets = []float64{
	0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
	1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
}

// metrics are a server's Prometheus metrics in its dialect. Every metric
// has the constant label cluster (Options.Cluster), and the dialect's
// model label when it has one.
type metrics struct {
	d            dialect
	promptTokens *prometheus.CounterVec   // token counters, or nil
	genTokens    *prometheus.CounterVec   //
	promptHist   *prometheus.HistogramVec // per-request token histograms (TGI), or nil
	genHist      *prometheus.HistogramVec //
	success      *prometheus.CounterVec   // model, finished_reason; nil when the dialect has none
	ttft         *prometheus.HistogramVec // nil when the dialect has none
}

// labels are the model label values of model (none without a model label).
func (m *metrics) labels(model string) []string {
	if m.d.modelLabel == "" {
		return nil
	}
	return []string{model}
}

// newMetrics registers the metrics of dialect d on reg. The load gauges
// are read from load at scrape time and labelled with the primary (first)
// model name, as vLLM labels everything with its first served model name;
// the counters are labelled with the model each request asked for and
// start at 0 for every model in models. With lora (nil: none) and a
// dialect that has one, the LoRA info gauge is read from lora at scrape
// time and stamped with now.
func newMetrics(reg prometheus.Registerer, d dialect, cluster string, models []string, load func() Load,
	lora func() LoRALoad, now func() time.Time,
) (*metrics, error) {
	reg = prometheus.WrapRegistererWith(prometheus.Labels{"cluster": cluster}, reg)
	var ml []string
	if d.modelLabel != "" {
		ml = []string{d.modelLabel}
	}
	m := &metrics{d: d}
	var cs []prometheus.Collector
	if d.tokenHistograms {
		tokens := prometheus.ExponentialBuckets(1, 2, 20)
		m.promptHist = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: d.prompt, Help: "Input tokens per request.", Buckets: tokens}, ml)
		m.genHist = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: d.gen, Help: "Generated tokens per request.", Buckets: tokens}, ml)
		cs = append(cs, m.promptHist, m.genHist)
	} else {
		m.promptTokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: d.prompt, Help: "Number of prefill tokens processed."}, ml)
		m.genTokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: d.gen, Help: "Number of generation tokens processed."}, ml)
		cs = append(cs, m.promptTokens, m.genTokens)
	}
	if d.success != "" {
		m.success = prometheus.NewCounterVec(prometheus.CounterOpts{Name: d.success, Help: "Count of successfully processed requests."}, append(slices.Clone(ml), "finished_reason"))
		cs = append(cs, m.success)
	}
	if d.ttft != "" {
		m.ttft = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: d.ttft, Help: "Histogram of time to first token in seconds.", Buckets: ttftBuckets}, ml)
		cs = append(cs, m.ttft)
	}
	lc := &loadCollector{load: load, labels: m.labels(models[0])}
	lc.running = prometheus.NewDesc(d.running, "Number of requests in model execution batches.", ml, nil)
	lc.waiting = prometheus.NewDesc(d.waiting, "Number of requests waiting to be processed.", ml, nil)
	if d.kv != "" {
		lc.kv = prometheus.NewDesc(d.kv, "KV-cache usage. 1 means 100 percent usage.", ml, nil)
	}
	cs = append(cs, lc)
	if lora != nil && d.loraInfo != "" {
		cs = append(cs, &loraCollector{
			lora: lora, now: now,
			desc: prometheus.NewDesc(d.loraInfo, "Running stats on lora requests.",
				[]string{"max_lora", "waiting_lora_adapters", "running_lora_adapters"}, nil),
		})
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("engine: register metrics: %w", err)
		}
	}
	for _, model := range models {
		if m.promptTokens != nil {
			m.promptTokens.WithLabelValues(m.labels(model)...)
			m.genTokens.WithLabelValues(m.labels(model)...)
		}
		if m.success != nil {
			for _, r := range []string{finishStop, finishLength, finishAbort} {
				m.success.WithLabelValues(append(m.labels(model), r)...)
			}
		}
	}
	return m, nil
}

// loadCollector exports a Backend's Load as gauges, read once per scrape so
// that the three values are consistent.
type loadCollector struct {
	load                 func() Load
	labels               []string
	running, waiting, kv *prometheus.Desc // kv nil when the dialect has none
}

func (c *loadCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.running
	ch <- c.waiting
	if c.kv != nil {
		ch <- c.kv
	}
}

func (c *loadCollector) Collect(ch chan<- prometheus.Metric) {
	l := c.load()
	ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, float64(l.Running), c.labels...)
	ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(l.Waiting), c.labels...)
	if c.kv != nil {
		ch <- prometheus.MustNewConstMetric(c.kv, prometheus.GaugeValue, l.KVCacheUsage, c.labels...)
	}
}

// loraCollector exports vllm:lora_requests_info as vLLM does
// (PrometheusStatLogger in vllm/v1/metrics/loggers.py): a gauge labelled
// max_lora, running_lora_adapters and waiting_lora_adapters (the names of
// the adapters with running, resp. waiting, requests, comma-joined in the
// backend's order), whose value is the Unix time in seconds when that
// combination was last seen. vLLM sets the current combination to the
// current time (set_to_current_time) whenever it records scheduler
// statistics, and a labelled gauge keeps every combination it ever had,
// each with its last time: a reader takes the series with the largest
// value.
//
// Divergences: the current combination is read and stamped at each
// scrape, not at every engine step (a combination that lived only between
// two scrapes never appears, and an idle replica's combination keeps
// getting newer times, where vLLM's stops when it stops stepping); and
// only the loraHistory most recently seen combinations are kept, where
// vLLM keeps all of them for the life of the process.
type loraCollector struct {
	lora func() LoRALoad
	now  func() time.Time
	desc *prometheus.Desc

	mu   sync.Mutex
	seen []loraCombo // oldest first; at most loraHistory
}

// loraCombo is one label combination and when it was last seen.
type loraCombo struct {
	maxLora, running, waiting string
	at                        float64 // Unix seconds
}

func (c *loraCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *loraCollector) Collect(ch chan<- prometheus.Metric) {
	l := c.lora()
	var running, waiting []string
	for _, a := range l.Adapters {
		if a.Running > 0 {
			running = append(running, a.Name)
		}
		if a.Waiting > 0 {
			waiting = append(waiting, a.Name)
		}
	}
	cur := loraCombo{
		maxLora: strconv.Itoa(l.MaxLoras),
		running: strings.Join(running, ","), waiting: strings.Join(waiting, ","),
		at: float64(c.now().UnixNano()) / 1e9,
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = slices.DeleteFunc(c.seen, func(x loraCombo) bool {
		return x.maxLora == cur.maxLora && x.running == cur.running && x.waiting == cur.waiting
	})
	if len(c.seen) == loraHistory {
		c.seen = slices.Delete(c.seen, 0, 1)
	}
	c.seen = append(c.seen, cur)
	for _, x := range c.seen {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, x.at, x.maxLora, x.waiting, x.running)
	}
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

// newGenTracker accounts job in m, labelled with model.
func newGenTracker(m *metrics, now func() time.Time, job genJob, model string) *genTracker {
	return &genTracker{
		m: m, now: now, model: model, start: now(),
		prompts: job.prompts, counts: make([]int, len(job.prompts)), want: job.maxTokens,
	}
}

// token records one token of choice i; the first one completes its prefill.
func (t *genTracker) token(i int) {
	lv := t.m.labels(t.model)
	if t.counts[i] == 0 {
		if t.m.ttft != nil {
			t.m.ttft.WithLabelValues(lv...).Observe(t.now().Sub(t.start).Seconds())
		}
		if t.m.promptTokens != nil {
			t.m.promptTokens.WithLabelValues(lv...).Add(float64(t.prompts[i]))
		}
	}
	t.counts[i]++
	if t.m.genTokens != nil {
		t.m.genTokens.WithLabelValues(lv...).Inc()
	}
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
	lv := t.m.labels(t.model)
	for i, n := range t.counts {
		reason := finishLength
		if n < t.want {
			reason = finishAbort
		}
		if t.m.success != nil {
			t.m.success.WithLabelValues(append(slices.Clone(lv), reason)...).Inc()
		}
		if t.m.promptHist != nil && n > 0 { // TGI observes a request as it ends
			t.m.promptHist.WithLabelValues(lv...).Observe(float64(t.prompts[i]))
			t.m.genHist.WithLabelValues(lv...).Observe(float64(n))
		}
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
