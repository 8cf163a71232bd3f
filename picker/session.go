package picker

import "github.com/ilbproject/ilb/internal/hashmix"

// sessionSalt separates session blocks from prompt blocks in a replica's
// cache (prompt chains start from a model's seed).
const sessionSalt = 0x5e5510c4a11b10c5

// sessionBlock is the block a session leaves in the cache of the replica
// that served it: it ages with the prompts sent there, so a session whose
// replica has since served much else is no longer credited there.
func sessionBlock(session uint64) uint64 { return hashmix.Mix(sessionSalt, session) }

// sessionEntry is where a session's last request went and its prompt
// tokens.
type sessionEntry struct {
	address string
	tokens  int
}

// sessions remembers the last replica of at most len(ring) sessions;
// the oldest first seen is forgotten first. Not safe for concurrent use
// (under the Cluster's lock).
type sessions struct {
	m    map[uint64]sessionEntry
	ring []uint64 // keys in the order first seen
	next int      // the slot of the next new key
}

func newSessions(capacity int) sessions {
	return sessions{m: map[uint64]sessionEntry{}, ring: make([]uint64, max(capacity, 1))}
}

func (s *sessions) get(key uint64) sessionEntry { return s.m[key] }

// put records key's entry, forgetting the oldest session when full.
func (s *sessions) put(key uint64, e sessionEntry) {
	if _, ok := s.m[key]; !ok {
		if len(s.m) == len(s.ring) {
			delete(s.m, s.ring[s.next])
		}
		s.ring[s.next] = key
		s.next = (s.next + 1) % len(s.ring)
	}
	s.m[key] = e
}
