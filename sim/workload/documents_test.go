package workload

import (
	"math"
	"slices"
	"testing"
)

// docSource is a source with a pool of n documents of the given length,
// per of them in a request, after a system prompt of shared tokens.
func docSource(name string, shared, n, tokens, per int, zipf float64) SourceSpec {
	src := baseSource(name, 10)
	src.SharedPrefixTokens = shared
	src.Documents, src.DocumentTokens, src.DocumentsPerRequest, src.DocumentZipf = n, tokens, per, zipf
	return src
}

// leadOf returns the hashes of the full blocks of the system prompt of
// models[m] and the documents docs of src, for the given seed.
func leadOf(src SourceSpec, seed uint64, models []string, m int, docs []int) []uint64 {
	sys := make([][]uint64, len(models))
	for i, name := range models {
		sys[i] = systemBlocks(src.Name, name, src.SharedPrefixTokens)
	}
	d := newDocuments(src, seed, 0, models, sys)
	return d.extend(slices.Clone(sys[m]), m, docs)
}

// common is the number of leading hashes a and b share.
func common(a, b []uint64) int {
	n := 0
	for n < min(len(a), len(b)) && a[n] == b[n] {
		n++
	}
	return n
}

// TestDocumentPrefixSharing checks the documented sharing: two leads share
// the system prompt's full blocks and those of their common leading
// documents, not one block more, whatever documents follow.
func TestDocumentPrefixSharing(t *testing.T) {
	geometries := []struct {
		name           string
		shared, tokens int
	}{
		{"blocks straddle system prompt and documents", 100, 500},
		{"aligned on blocks", 64, 32},
		{"documents shorter than a block", 40, 10},
		{"no system prompt", 0, 48},
	}
	type side struct {
		source string
		seed   uint64
		model  int
		docs   []int
	}
	a := side{"eu", 1, 0, []int{3, 7, 1}}
	tests := []struct {
		name  string
		b     side
		share int // leading documents shared; -1: not even the system prompt
	}{
		{"same documents, same order", a, 3},
		{"same first two documents, other third", side{"eu", 1, 0, []int{3, 7, 2}}, 2},
		{"same first document, other second", side{"eu", 1, 0, []int{3, 2, 1}}, 1},
		{"other first document, same others", side{"eu", 1, 0, []int{4, 7, 1}}, 0},
		{"same documents, other order", side{"eu", 1, 0, []int{7, 3, 1}}, 0},
		{"other seed: other documents, same system prompt", side{"eu", 2, 0, a.docs}, 0},
		{"other model", side{"eu", 1, 1, a.docs}, -1},
		{"other source", side{"us", 1, 0, a.docs}, -1},
	}
	models := []string{"llama", "qwen"}
	for _, g := range geometries {
		for _, tt := range tests {
			t.Run(g.name+"/"+tt.name, func(t *testing.T) {
				lead := func(s side) []uint64 {
					return leadOf(docSource(s.source, g.shared, 10, g.tokens, 3, 1), s.seed, models, s.model, s.docs)
				}
				x, y := lead(a), lead(tt.b)
				if want := (g.shared + 3*g.tokens) / BlockTokens; len(x) != want || len(y) != want {
					t.Fatalf("%d and %d blocks, want %d", len(x), len(y), want)
				}
				want := 0
				if tt.share >= 0 {
					want = (g.shared + tt.share*g.tokens) / BlockTokens
				}
				if got := common(x, y); got != want {
					t.Errorf("%d common blocks, want %d", got, want)
				}
			})
		}
	}
}

// TestDocumentDraws checks the sampler: distinct documents, drawn with the
// probabilities of Zipf weights without replacement.
func TestDocumentDraws(t *testing.T) {
	tests := []struct {
		name   string
		n, per int
		zipf   float64
	}{
		{"uniform pairs", 5, 2, 0},
		{"zipf 1 pairs", 5, 2, 1},
		{"zipf 2.5 triples", 6, 3, 2.5},
		{"steep zipf, every document", 40, 40, MaxDocumentZipf},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := docSource("eu", 0, tt.n, 16, tt.per, tt.zipf)
			d := newDocuments(src, 1, 0, []string{"m"}, [][]uint64{nil})
			const draws = 200000
			pairs := map[[2]int]float64{}
			for range draws {
				d.draw()
				if len(d.drawn) != tt.per || !slices.IsSorted(d.sorted) || len(slices.Compact(slices.Clone(d.sorted))) != tt.per {
					t.Fatalf("drew %v, want %d distinct documents", d.drawn, tt.per)
				}
				pairs[[2]int{d.drawn[0], d.drawn[1]}]++
			}
			if tt.per == tt.n {
				return // all drawn, in whatever order
			}
			// P(i then j) = p_i × p_j / (1 - p_i).
			w := func(i int) float64 { return math.Pow(float64(i+1), -tt.zipf) / d.cum[tt.n-1] }
			for i := range tt.n {
				for j := range tt.n {
					if i == j {
						continue
					}
					want := w(i) * w(j) / (1 - w(i))
					got := pairs[[2]int{i, j}] / draws
					if sd := math.Sqrt(want * (1 - want) / draws); math.Abs(got-want) > 5*sd+1e-4 {
						t.Errorf("P(%d then %d) = %.4f, want %.4f", i, j, got, want)
					}
				}
			}
		})
	}
}

// TestGenerateDocumentZipf checks the skew end to end: the share of the
// requests whose first document is the most popular one is 1/H(n, s).
func TestGenerateDocumentZipf(t *testing.T) {
	const n = 100
	last := 0.0
	for _, s := range []float64{0, 0.5, 1, 1.5, 2} {
		src := docSource("eu", 0, n, 2*BlockTokens, 2, s)
		reqs := generate(t, docSpec(src))
		first := leadOf(src, 1, []string{"m"}, 0, []int{0})[0]
		hot := 0
		for _, r := range reqs {
			if r.Prefix[0] == first {
				hot++
			}
		}
		h := 0.0
		for i := range n {
			h += math.Pow(float64(i+1), -s)
		}
		got := float64(hot) / float64(len(reqs))
		sd := math.Sqrt(got * (1 - got) / float64(len(reqs)))
		if want := 1 / h; math.Abs(got-want) > 5*sd {
			t.Errorf("s = %g: share of the most popular document %.4f, want %.4f", s, got, want)
		}
		if got <= last {
			t.Errorf("s = %g: share of the most popular document %.4f, want more than %.4f at a smaller s", s, got, last)
		}
		last = got
	}
}
