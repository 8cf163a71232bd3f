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
	// MaxBlocks bounds the blocks hashed per prompt: the first 128 KiB
	// (about 32k tokens) identify it. Past that, a longer shared prefix
	// earns no more affinity, and the hashing cost stays bounded whatever
	// the prompt size.
	MaxBlocks = 512
)

// Seed returns the chain's starting value for a model: prompts of
// different models never share a block.
func Seed(model string) uint64 { return xxhash.Sum64String(model) }

// AppendBlocks appends to dst the hashes of text's full blocks, at most
// MaxBlocks - len(dst) of them, chained from seed, and returns dst. A
// trailing partial block is not hashed: its content is still growing in
// the next turn of a conversation. It allocates only when dst lacks room.
func AppendBlocks(dst []uint64, seed uint64, text []byte) []uint64 {
	h := seed
	for i := 0; i+BlockBytes <= len(text) && len(dst) < MaxBlocks; i += BlockBytes {
		h = hashmix.Mix(h, xxhash.Sum64(text[i:i+BlockBytes]))
		dst = append(dst, h)
	}
	return dst
}
