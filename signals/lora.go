package signals

import (
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"

	"github.com/ilbproject/ilb/internal/bound"
)

// LoRA is what an engine reports of its LoRA adapters: vLLM's gauge
// vllm:lora_requests_info (vllm/v1/metrics/loggers.py), whose labels
// running_lora_adapters and waiting_lora_adapters name, comma-separated,
// the adapters of its running and waiting requests and max_lora the most
// adapters one batch may use, and whose value is the time it was set
// (set_to_current_time). As a labelled gauge every combination ever set
// stays exported with its old time: the series with the largest value is
// the current one (as GIE's metrics extractor reads it). SGLang exports no
// equivalent.
type LoRA struct {
	// Running and Waiting are the adapters of the engine's running and
	// waiting requests, sorted, each name at most bound.Name bytes, at
	// most MaxReportedAdapters of each (the rest are dropped, with a
	// problem).
	Running []string `json:"running,omitempty"`
	Waiting []string `json:"waiting,omitempty"`
	// Max is the engine's max_lora: the adapters one batch may use; 0
	// when not reported.
	Max int `json:"max_lora,omitempty"`
}

// MaxReportedAdapters bounds the adapters kept of each list of one
// replica's report: vLLM's max_lora is a few to a few dozen.
const MaxReportedAdapters = 64

// maxLoRASlots bounds max_lora.
const maxLoRASlots = 4096

// Has reports whether the adapter runs or waits on the engine.
func (l *LoRA) Has(adapter string) bool {
	if l == nil {
		return false
	}
	_, run := slices.BinarySearch(l.Running, adapter)
	_, wait := slices.BinarySearch(l.Waiting, adapter)
	return run || wait
}

// readLoRA reads the family named name from fams: nil when absent.
func (r *reader) readLoRA(name string) *LoRA {
	f := r.fams[name]
	if name == "" || f == nil || len(f.GetMetric()) == 0 {
		return nil
	}
	var cur *dto.Metric
	var at float64
	for _, m := range f.GetMetric() {
		v := m.GetGauge().GetValue()
		if m.GetGauge() == nil {
			v = m.GetUntyped().GetValue()
		}
		if cur == nil || v > at {
			cur, at = m, v
		}
	}
	l := &LoRA{}
	for _, lp := range cur.GetLabel() {
		switch lp.GetName() {
		case "running_lora_adapters":
			l.Running = r.adapterList(name, "running_lora_adapters", lp.GetValue())
		case "waiting_lora_adapters":
			l.Waiting = r.adapterList(name, "waiting_lora_adapters", lp.GetValue())
		case "max_lora":
			n, err := strconv.Atoi(lp.GetValue())
			if err != nil || n < 0 || n > maxLoRASlots {
				r.problemf("%s: max_lora %s is not a number of adapters in [0, %d]: unknown", name, bound.Quote(lp.GetValue(), bound.Excerpt), maxLoRASlots)
				continue
			}
			l.Max = n
		}
	}
	return l
}

// adapterList splits a comma-separated list of adapter names, bounded,
// sorted, without empty names or duplicates.
func (r *reader) adapterList(family, label, v string) []string {
	var out []string
	dropped := 0
	for a := range strings.SplitSeq(v, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if len(out) == MaxReportedAdapters {
			dropped++
			continue
		}
		out = append(out, bound.String(a, bound.Name))
	}
	if dropped > 0 {
		r.problemf("%s: %s lists more than %d adapters: %d dropped", family, label, MaxReportedAdapters, dropped)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
