package workload

import (
	"math"
	"math/rand/v2"
	"slices"
	"sort"
)

// Bounds of the document fields of a [SourceSpec].
const (
	// MaxDocuments is the largest pool of documents of a source.
	MaxDocuments = 1 << 20
	// MaxDocumentZipf is the largest Zipf exponent of document popularity:
	// beyond it, nearly every request draws the same first documents.
	MaxDocumentZipf = 10.0
)

// documents is the retrieval pool of a source: it draws the documents of a
// request and hashes the blocks of the prompt's lead, that is the system
// prompt followed by the documents.
//
// Document i has Zipf weight (i+1)^-s. A request draws its documents in
// turn without replacement: each from the documents not drawn yet, in
// proportion to their weights, with one Float64 of the source's document
// stream per document.
//
// The hash of a full block of the lead is mix(hash of the previous block,
// content), starting from the system prompt's last full block, or from the
// system prompt's root when it has none. The content names what the block
// holds: the key of the segment (the system prompt, or one document)
// holding its first token and that token's offset in it, then the keys of
// the documents starting within the block. A document's key depends on the
// source, the seed and its index only, so two leads share exactly their
// blocks before the first block whose tokens differ.
type documents struct {
	rand   *rand.Rand
	per    int                // documents per request
	tokens int                // tokens per document
	shared int                // system prompt tokens
	salt   uint64             // per source and seed: the documents' keys
	roots  []uint64           // system prompt root per model index
	sys    [][]uint64         // system prompt blocks per model index
	cum    []float64          // cumulative Zipf weights, by document index
	single []map[int][]uint64 // per model, when per is 1: lead blocks by document
	drawn  []int              // documents of the current request, in draw order
	sorted []int              // the same, ascending
	keys   []uint64           // scratch: the keys of the documents of a lead
}

// newDocuments returns the pool of source i of a spec with the given seed,
// or nil when src has no documents. models are the source's model names,
// sys their system prompt blocks.
func newDocuments(src SourceSpec, seed uint64, i int, models []string, sys [][]uint64) *documents {
	if src.Documents == 0 {
		return nil
	}
	d := &documents{
		rand:   newRand(seed, i, streamDocuments),
		per:    src.DocumentsPerRequest,
		tokens: src.DocumentTokens,
		shared: src.SharedPrefixTokens,
		salt:   mix(mix(tagDocument, seed), hashString(src.Name)),
		roots:  make([]uint64, len(models)),
		sys:    sys,
		cum:    make([]float64, src.Documents),
		drawn:  make([]int, 0, src.DocumentsPerRequest),
		sorted: make([]int, 0, src.DocumentsPerRequest),
	}
	for m, name := range models {
		d.roots[m] = systemRoot(src.Name, name)
	}
	total := 0.0
	for j := range d.cum {
		total += math.Pow(float64(j+1), -src.DocumentZipf)
		d.cum[j] = total
	}
	if d.per == 1 {
		d.single = make([]map[int][]uint64, len(models))
		for m := range d.single {
			d.single[m] = map[int][]uint64{}
		}
	}
	return d
}

// lead draws the documents of a request for model m and returns the
// hashes of the full blocks of its lead and the lead's length in tokens.
// The blocks may be shared with other requests: read-only.
func (d *documents) lead(m int) (blocks []uint64, tokens int) {
	d.draw()
	tokens = d.shared + d.per*d.tokens
	if d.single != nil {
		cached, ok := d.single[m][d.drawn[0]]
		if !ok {
			cached = slices.Clip(d.extend(slices.Clone(d.sys[m]), m, d.drawn))
			d.single[m][d.drawn[0]] = cached
		}
		return cached, tokens
	}
	blocks = make([]uint64, len(d.sys[m]), tokens/BlockTokens)
	copy(blocks, d.sys[m])
	return d.extend(blocks, m, d.drawn), tokens
}

// draw sets drawn to d.per distinct documents, drawn in turn.
func (d *documents) draw() {
	d.drawn, d.sorted = d.drawn[:0], d.sorted[:0]
	rest := d.cum[len(d.cum)-1]
	for range d.per {
		i := d.pick(d.rand.Float64() * rest)
		rest -= d.width(i)
		d.drawn = append(d.drawn, i)
		at, _ := slices.BinarySearch(d.sorted, i)
		d.sorted = slices.Insert(d.sorted, at, i)
	}
}

// pick maps x in [0, weight of the documents not drawn yet) to one of
// them: the drawn documents' intervals are cut out of the cumulative
// weights. Rounding may land on a drawn document (or past the last one)
// when the weights span many orders of magnitude; the nearest document not
// drawn is taken then.
func (d *documents) pick(x float64) int {
	for _, c := range d.sorted {
		if x < d.start(c) {
			break
		}
		x += d.width(c)
	}
	n := len(d.cum)
	i := min(sort.Search(n, func(j int) bool { return d.cum[j] > x }), n-1)
	for lo, hi := i, i; ; lo, hi = lo-1, hi+1 {
		if _, taken := slices.BinarySearch(d.sorted, lo); lo >= 0 && !taken {
			return lo
		}
		if _, taken := slices.BinarySearch(d.sorted, hi); hi < n && !taken {
			return hi
		}
	}
}

// start and width give document i's interval of the cumulative weights.
func (d *documents) start(i int) float64 {
	if i == 0 {
		return 0
	}
	return d.cum[i-1]
}

func (d *documents) width(i int) float64 { return d.cum[i] - d.start(i) }

// extend appends to blocks, which hold the hashes of the first len(blocks)
// full blocks of the lead (at least the system prompt's), those of the
// other full blocks of the lead of model m with the given documents.
func (d *documents) extend(blocks []uint64, m int, docs []int) []uint64 {
	root := d.roots[m]
	h := root
	if len(blocks) > 0 {
		h = blocks[len(blocks)-1]
	}
	d.keys = d.keys[:0]
	for _, doc := range docs {
		d.keys = append(d.keys, mix(d.salt, uint64(doc)))
	}
	end := d.shared + len(docs)*d.tokens
	for j := len(blocks); j < end/BlockTokens; j++ {
		// The segment holding the block's first token, the token's offset
		// in it, and where the next segment starts.
		pos := j * BlockTokens
		key, off, next := root, pos, d.shared
		if pos >= d.shared {
			k := (pos - d.shared) / d.tokens
			key, off, next = d.keys[k], (pos-d.shared)%d.tokens, d.shared+(k+1)*d.tokens
		}
		content := mix(key, uint64(off))
		// The documents starting within the block.
		for k := (next - d.shared) / d.tokens; next < pos+BlockTokens; k, next = k+1, next+d.tokens {
			content = mix(content, d.keys[k])
		}
		h = mix(h, content)
		blocks = append(blocks, h)
	}
	return blocks
}
