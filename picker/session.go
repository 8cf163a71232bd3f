package picker

import "github.com/ilbproject/ilb/internal/hashmix"

// sessionSalt separates session chains from prompt chains in a replica's
// index (prompt chains start from a model's seed).
const sessionSalt = 0x5e5510c4a11b10c5

// sessionChain appends to dst the session's chain for n blocks (Hashes(n)
// of them, shaped as a prompt's): what a prompt of n blocks of that
// session leaves in the
// index of the replica it goes to, in place of its unread content. Block
// i is the same for every request of the session, so a longer request's
// chain extends a shorter one's, as a conversation's prompt extends its
// last; the chain is recorded and ages like a prompt's, so what a
// replica still holds of it is a prefix.
func sessionChain(dst []uint64, session uint64, n int) []uint64 {
	root := hashmix.Mix(sessionSalt, session)
	for i := range Hashes(n) {
		dst = append(dst, hashmix.Mix(root, uint64(i)))
	}
	return dst
}
