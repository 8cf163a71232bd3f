package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
)

// MaxAdapters bounds [AdapterSpec.Count].
const MaxAdapters = 4096

// AdapterSpec gives a share of a source's requests a LoRA adapter of
// their model (vLLM serves many adapters on one base model).
type AdapterSpec struct {
	// Share is the fraction of requests, in [0, 1], that name an adapter;
	// the others ask for the base model.
	Share float64
	// Count is the adapters per model, in [0, MaxAdapters]: adapter i
	// (from 0) of model m is AdapterName(m, i). 0: none.
	Count int
	// Zipf is the exponent s of their popularity, in [0,
	// MaxDocumentZipf]: adapter i has weight (i+1)^-s (0: uniform).
	Zipf float64
}

// AdapterName is the name of adapter i of model.
func AdapterName(model string, i int) string { return fmt.Sprintf("%s-lora-%d", model, i) }

// adapters draws a request's adapter from its own stream (the other draws
// stay aligned with a workload without adapters); a session keeps the
// adapter of its first turn.
type adapters struct {
	spec AdapterSpec
	r    *rand.Rand
	cum  []float64 // cumulative Zipf weights; the last is the total
	// names[m][i] is AdapterName(model m, i), built once.
	names [][]string
}

func newAdapters(spec AdapterSpec, seed uint64, index int, models []string) *adapters {
	if spec.Count <= 0 || !(spec.Share > 0) {
		return nil
	}
	a := &adapters{spec: spec, r: newRand(seed, index, streamAdapters), cum: make([]float64, spec.Count)}
	total := 0.0
	for i := range spec.Count {
		total += math.Pow(float64(i+1), -spec.Zipf)
		a.cum[i] = total
	}
	for _, m := range models {
		ns := make([]string, spec.Count)
		for i := range ns {
			ns[i] = AdapterName(m, i)
		}
		a.names = append(a.names, ns)
	}
	return a
}

// draw returns a new request's adapter of model index m ("" the base
// model).
func (a *adapters) draw(m int) string {
	if a == nil {
		return ""
	}
	coin, u := a.r.Float64(), a.r.Float64()
	if coin >= a.spec.Share {
		return ""
	}
	i, _ := slices.BinarySearch(a.cum, u*a.cum[len(a.cum)-1])
	return a.names[m][min(i, len(a.cum)-1)]
}

// salt makes the prefix hashes of an adapter's request its own: an engine
// caches an adapter's blocks apart from the base model's and from other
// adapters' (vLLM's block hashes include the LoRA id).
func salt(prefix []uint64, adapter string) []uint64 {
	if adapter == "" || len(prefix) == 0 {
		return prefix
	}
	h := uint64(0xcbf29ce484222325)
	for i := range len(adapter) {
		h = (h ^ uint64(adapter[i])) * 0x100000001b3
	}
	out := make([]uint64, len(prefix))
	for i, p := range prefix {
		out[i] = mix(p, h)
	}
	return out
}
