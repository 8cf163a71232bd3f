package workload

import "github.com/ilbproject/ilb/internal/hashmix"

// Prefix block hashes. A block's hash is mix(hash of the previous block,
// content of this block), starting from a root: equal prefixes give equal
// hashes, and a hash says nothing about the blocks after it.

// Domain tags, so that hashes of different kinds never meet.
const (
	tagSystem   = 0x73797374656d // "system"
	tagSession  = 0x73657373696f6e
	tagTrace    = 0x7472616365
	tagStream   = 0x73747265616d
	tagDocument = 0x646f63756d656e74
)

// mix combines a hash with a value (see hashmix.Mix).
func mix(h, v uint64) uint64 { return hashmix.Mix(h, v) }

// hashString is FNV-1a over s, mixed; it does not allocate.
func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := range len(s) {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return mix(h, uint64(len(s)))
}

// systemBlocks returns the hashes of the full blocks of the system prompt
// of source and model, n tokens long: the same for every request of that
// source and model, whatever the seed.
func systemBlocks(source, model string, n int) []uint64 {
	blocks := make([]uint64, n/BlockTokens)
	h := systemRoot(source, model)
	for j := range blocks {
		h = mix(h, uint64(j))
		blocks[j] = h
	}
	return blocks
}

// systemRoot is the root of the hash chain of the prompts of source and
// model: their system prompt, and the documents after it.
func systemRoot(source, model string) uint64 {
	return mix(mix(tagSystem, hashString(source)), hashString(model))
}

// extendBlocks appends to blocks the hashes of blocks len(blocks) ..
// n/BlockTokens-1 of a prompt of n tokens whose content past the shared
// system prompt is that of the conversation with the given content seed.
// It is a no-op when blocks already covers n tokens.
func extendBlocks(blocks []uint64, content uint64, n int) []uint64 {
	h := uint64(tagSession)
	if len(blocks) > 0 {
		h = blocks[len(blocks)-1]
	}
	for j := len(blocks); j < n/BlockTokens; j++ {
		h = mix(h, mix(content, uint64(j)))
		blocks = append(blocks, h)
	}
	return blocks
}

// traceBlocks expands trace hash IDs, one per perID blocks, into
// per-block hashes for a prompt of n tokens, salted with the source so that
// two sources replaying one trace do not share prompts.
func traceBlocks(salt uint64, ids []uint64, perID, n int) []uint64 {
	count := min(len(ids)*perID, n/BlockTokens)
	if count == 0 {
		return nil
	}
	blocks := make([]uint64, count)
	for j := range blocks {
		blocks[j] = mix(mix(salt, ids[j/perID]), uint64(j%perID))
	}
	return blocks
}
