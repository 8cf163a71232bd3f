package workload

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

// docSpec is a 10-minute workload of the given sources, seed 1.
func docSpec(sources ...SourceSpec) Spec {
	return Spec{Duration: 10 * time.Minute, Seed: 1, Sources: sources}
}

// TestGenerateDocuments checks the requests of a source with documents:
// each independent request's prompt is the system prompt, two distinct
// documents and a question, and its Prefix is exactly the full blocks of
// the system prompt and documents; a session's first turn starts with
// them too, and its later turns keep them without drawing more.
func TestGenerateDocuments(t *testing.T) {
	const shared, n, tokens, per = 40, 4, 100, 2
	lead := shared + per*tokens
	models := []string{"llama", "qwen"}
	src := docSource("eu", shared, n, tokens, per, 0.8)
	src.Models = []Share{{models[0], 1}, {models[1], 1}}
	src.SessionShare, src.SessionTurns = 0.3, 3
	// The last hash of each lead names its model and documents.
	leads := map[uint64][]uint64{}
	for m := range models {
		for i := range n {
			for j := range n {
				if i != j {
					b := leadOf(src, 1, models, m, []int{i, j})
					leads[b[len(b)-1]] = b
				}
			}
		}
	}
	reqs := generate(t, docSpec(src))
	seen := map[uint64]bool{}
	for _, r := range reqs {
		if r.Prompt < lead+1 || r.Prompt > MaxTokens || len(r.Prefix) < lead/BlockTokens {
			t.Fatalf("request %+v: want a prompt in [%d, %d] and at least %d prefix blocks", r, lead+1, MaxTokens, lead/BlockTokens)
		}
		first := r.Prefix[:lead/BlockTokens]
		want, ok := leads[first[len(first)-1]]
		if !ok || !slices.Equal(first, want) {
			t.Fatalf("request %+v: prefix does not start with a system prompt and two distinct documents", r)
		}
		if want := leadOf(src, 1, models, slices.Index(models, r.Model), nil); !slices.Equal(first[:len(want)], want) {
			t.Fatalf("request %+v: prefix does not start with its model's system prompt", r)
		}
		if r.Session == "" && len(r.Prefix) != lead/BlockTokens {
			t.Fatalf("request %+v: %d prefix blocks, want the %d of its system prompt and documents", r, len(r.Prefix), lead/BlockTokens)
		}
		seen[first[len(first)-1]] = true
	}
	if len(seen) != len(leads) {
		t.Errorf("%d of the %d (model, first, second document) leads drawn", len(seen), len(leads))
	}
	for key, turns := range sessionsOf(reqs) {
		for i := 1; i < len(turns); i++ {
			prev, r := turns[i-1], turns[i]
			if !slices.Equal(r.Prefix[:len(prev.Prefix)], prev.Prefix) || r.Prompt <= prev.Prompt+prev.Output {
				t.Fatalf("session %s turn %d: does not extend the previous turn", key, i)
			}
		}
	}
}

// TestGenerateDocumentsMoveNoOtherDraw checks that documents have their
// own random stream: with them, every request has the arrival, model,
// priority, output and session it has without them, and a prompt longer
// by the documents exactly, counted once in every turn of a session.
func TestGenerateDocumentsMoveNoOtherDraw(t *testing.T) {
	plain := sessionSpec(0.5, 4, 5*time.Second, 100)
	plain.Duration = 10 * time.Minute
	with := sessionSpec(0.5, 4, 5*time.Second, 100)
	with.Duration = plain.Duration
	for i := range with.Sources {
		s := &with.Sources[i]
		s.Documents, s.DocumentTokens, s.DocumentsPerRequest, s.DocumentZipf = 50, 300, 3, 1
	}
	a, b := generate(t, plain), generate(t, with)
	if len(a) != len(b) {
		t.Fatalf("%d requests with documents, %d without", len(b), len(a))
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.At != y.At || x.Source != y.Source || x.Model != y.Model || x.Priority != y.Priority || x.Output != y.Output || x.Session != y.Session {
			t.Fatalf("request %d: %+v with documents, %+v without", i, y, x)
		}
		if y.Prompt != x.Prompt+3*300 {
			t.Fatalf("request %d: prompt %d with documents, %d without: want 900 more", i, y.Prompt, x.Prompt)
		}
		if sys := 100 / BlockTokens; !slices.Equal(x.Prefix[:sys], y.Prefix[:sys]) {
			t.Fatalf("request %d: the system prompt hashes differently with documents", i)
		}
	}
}

// TestGenerateDocumentHashesApart checks that the blocks of system
// prompts, documents and sessions never share a hash.
func TestGenerateDocumentHashesApart(t *testing.T) {
	for _, shared := range []int{0, 100} {
		src := docSource("eu", shared, 20, 70, 2, 1)
		src.SessionShare, src.SessionTurns = 0.5, 3
		lead := (shared + 2*70) / BlockTokens
		kind := map[uint64]string{}
		add := func(what string, hashes []uint64) {
			for _, h := range hashes {
				if k, ok := kind[h]; ok && k != what {
					t.Fatalf("system prompt of %d tokens: a hash of %s is also one of %s", shared, what, k)
				}
				kind[h] = what
			}
		}
		add("the system prompt", systemBlocks("eu", "m", shared))
		for _, r := range generate(t, docSpec(src)) {
			add("documents", r.Prefix[shared/BlockTokens:lead])
			add("sessions", r.Prefix[lead:])
		}
	}
}

// TestGenerateDocumentsDeterminism checks that documents depend on the
// source, seed and index only.
func TestGenerateDocumentsDeterminism(t *testing.T) {
	spec := func(seed uint64, usZipf float64) Spec {
		s := docSpec(docSource("eu", 64, 30, 200, 2, 1), docSource("us", 64, 30, 200, 2, usZipf))
		s.Seed = seed
		return s
	}
	a := generate(t, spec(1, 1))
	sys := 64 / BlockTokens
	tests := []struct {
		name          string
		other         []Request
		source        string // compare only this source; "" for all
		equal         bool
		sameDocuments bool // the first document's blocks hash alike
	}{
		{"same seed, same requests", generate(t, spec(1, 1)), "", true, true},
		{"another source's skew leaves a source alone", generate(t, spec(1, 2)), "eu", true, true},
		{"the changed source changes", generate(t, spec(1, 2)), "us", false, true},
		{"another seed, other documents", generate(t, spec(2, 1)), "", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x, y := a, tt.other
			if tt.source != "" {
				x, y = bySource(x)[tt.source], bySource(y)[tt.source]
			}
			if got := reflect.DeepEqual(x, y); got != tt.equal {
				t.Errorf("equal %v, want %v", got, tt.equal)
			}
			docs := map[uint64]bool{}
			for _, r := range x {
				docs[r.Prefix[sys]] = true
			}
			shared := 0
			for _, r := range y {
				if !slices.Equal(r.Prefix[:sys], x[0].Prefix[:sys]) && r.Source == x[0].Source {
					t.Fatal("the system prompt hashes differently")
				}
				if docs[r.Prefix[sys]] {
					shared++
				}
			}
			if got := shared == len(y); got != tt.sameDocuments {
				t.Errorf("%d of %d first documents found in both, want all: %v", shared, len(y), tt.sameDocuments)
			}
		})
	}
}

// TestGenerateDocumentsFillContext checks the MaxTokens rule: documents
// are kept whole and the question is cut, down to one token.
func TestGenerateDocumentsFillContext(t *testing.T) {
	tests := []struct {
		name                string
		shared, tokens, per int
	}{
		{"room for one question token", 0, MaxTokens - 1, 1},
		{"questions cut", 300, 15000, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := docSource("eu", tt.shared, 5, tt.tokens, tt.per, 0)
			src.SessionShare, src.SessionTurns = 0.5, 5
			lead := tt.shared + tt.per*tt.tokens
			cut := 0
			for _, r := range generate(t, docSpec(src)) {
				if r.Prompt <= lead || r.Prompt > MaxTokens || len(r.Prefix) < lead/BlockTokens {
					t.Fatalf("request %+v: want a prompt in (%d, %d] and the documents' blocks", r, lead, MaxTokens)
				}
				if r.Prompt == MaxTokens {
					cut++
				}
			}
			if cut == 0 {
				t.Error("no question was cut")
			}
		})
	}
}
