package picker

import (
	"github.com/cespare/xxhash/v2"

	"github.com/ilbproject/ilb/internal/hashmix"
)

// Prefix identity. A prompt is cut into blocks of BlockBytes bytes of its
// raw text (for a chat request, the raw JSON of its messages, which a
// client resends unchanged as a conversation grows); block i's hash is
// that of the block's bytes chained with block i-1's hash, starting from
// a seed (the model). Two prompts share the hash of block i exactly when
// they share their first (i+1)×BlockBytes bytes (up to hash collisions),
// so a replica that served one holds, in its engine's prefix cache, about
// the first i+1 blocks of the other.
const (
	// BlockBytes is the size of a block: 256 bytes, about 64 tokens at 4
	// bytes a token (GIE's and llm-d's approximate prefix indexes use
	// blocks of 16–64 tokens; coarser blocks cost less to hash and index,
	// and a cache hit shorter than 64 tokens saves little prefill).
	BlockBytes = 256
	// BlockTokens is the tokens a block stands for, at 4 bytes a token.
	BlockTokens = BlockBytes / 4
	// DenseBlocks is how many leading blocks are each hashed: the first
	// 128 KiB (about 32k tokens), where most shared prefixes end.
	DenseBlocks = 512
	// SparseStride is, past them, how many blocks one hash covers: a
	// checkpoint every 2 KiB (about 512 tokens), so a long shared prefix
	// — a RAG corpus, an agent's history — is credited within 512
	// tokens of its length at an eighth of the index entries.
	SparseStride = 8
	// MaxBlocks bounds the hashes per prompt: the dense 512 and 448
	// sparse ones, about 262k tokens in all (any model's context); past
	// that a longer shared prefix earns no more affinity, and the index
	// cost stays bounded whatever the prompt size.
	MaxBlocks = DenseBlocks + 448
)

// Seed returns the chain's starting value for a model: prompts of
// different models never share a block.
func Seed(model string) uint64 { return xxhash.Sum64String(model) }

// AppendBlocks appends to dst the chain of text's hashes — one per full
// block for the first DenseBlocks, then one per full SparseStride blocks
// — at most MaxBlocks of them, chained from seed, and returns dst. dst's
// existing elements are kept and do not count. A trailing partial block
// (or sparse span) is not hashed: its content is still growing in the
// next turn of a conversation. It allocates only when dst lacks room.
func AppendBlocks(dst []uint64, seed uint64, text []byte) []uint64 {
	h, n, i := seed, 0, 0
	for n < MaxBlocks {
		size := BlockBytes
		if n >= DenseBlocks {
			size = BlockBytes * SparseStride
		}
		if i+size > len(text) {
			break
		}
		h = hashmix.Mix(h, xxhash.Sum64(text[i:i+size]))
		dst = append(dst, h)
		i += size
		n++
	}
	return dst
}

// Hashes is how many hashes a chain has for a prompt of blocks full
// blocks (at most MaxBlocks).
func Hashes(blocks int) int {
	if blocks <= DenseBlocks {
		return max(blocks, 0)
	}
	return min(DenseBlocks+(blocks-DenseBlocks)/SparseStride, MaxBlocks)
}

// Span is the blocks the first n hashes of a chain cover: tokens
// credited are Span(n) × BlockTokens.
func Span(n int) int {
	if n <= DenseBlocks {
		return max(n, 0)
	}
	return DenseBlocks + (min(n, MaxBlocks)-DenseBlocks)*SparseStride
}

// Hashed reports whether a chain has a hash ending at block i (0-based):
// every block of the dense part, the last of each sparse span. A caller
// that has block hashes of its own (the routing benchmark's workloads)
// keeps those for which it is true, and gets the chain's shape.
func Hashed(i int) bool {
	if i < DenseBlocks {
		return i >= 0
	}
	return (i-DenseBlocks+1)%SparseStride == 0 && Span(MaxBlocks) > i
}
