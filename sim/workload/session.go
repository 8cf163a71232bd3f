package workload

import (
	"container/heap"
	"math/rand/v2"
	"strconv"
)

// session is an open conversation of one source.
type session struct {
	key             string
	model, priority int      // indexes in the source's pickers
	adapter         string   // its LoRA adapter ("" the base model)
	prompt, output  int      // lengths of the last turn
	blocks          []uint64 // hashes of the full blocks of the last prompt
	content         uint64   // seed of the hashes of its own blocks
	left            int      // turns still to come
	due             float64  // earliest time of the next turn, in seconds
}

// sessions are the open sessions of a source, waiting for their next turn.
//
// A session request of the source (drawn with probability SessionShare)
// goes to the open session that has been due the longest, if any: a turn
// comes at least its think time after the previous one, and later if no
// session request arrives then. Otherwise the request starts a session
// with a geometric number of turns. As a session takes a turn only when
// due, the number of open sessions stays about (session request rate) ×
// (think time), and every session gets all its turns but those cut by the
// end of the workload or by a full context window.
type sessions struct {
	source  string
	salt    uint64  // per source and seed: the content of its sessions
	turns   float64 // mean turns per session
	think   float64 // mean think time, seconds
	growth  float64 // mean tokens a turn adds: new message and answer
	open    sessionHeap
	started int
}

// newSessions returns the sessions of src; growth is the mean number of
// tokens a turn adds to the conversation (new message and answer), used to
// size the hash buffers.
func newSessions(src SourceSpec, seed uint64, growth float64) *sessions {
	name := src.Name
	if src.Tenant != "" {
		name += "/" + src.Tenant // keys stay unique across a source's tenants
	}
	return &sessions{
		source: name,
		salt:   mix(mix(tagSession, seed), hashString(name)),
		turns:  src.SessionTurns,
		think:  src.SessionThink.Seconds(),
		growth: growth,
	}
}

// take pops the session due the longest at t whose next prompt, with a new
// message of msg tokens, fits in MaxTokens; it ends (drops) the sessions
// due before it that do not fit. It returns nil when no session is due.
func (ss *sessions) take(t float64, msg int) *session {
	for len(ss.open) > 0 && ss.open[0].due <= t {
		s := heap.Pop(&ss.open).(*session)
		if s.prompt+s.output+msg <= MaxTokens {
			return s
		}
	}
	return nil
}

// start opens a session whose first turn's prompt begins with a lead of
// leadTokens tokens (the system prompt and the documents) whose full
// blocks hash to lead; later turns keep the lead as history.
func (ss *sessions) start(r *rand.Rand, model, priority int, lead []uint64, leadTokens int) *session {
	ss.started++
	left := geometric(r, ss.turns)
	// Room for the blocks of all its turns, on average, in one allocation.
	size := min(int(1.25*(float64(leadTokens)+float64(left)*ss.growth))/BlockTokens+1, MaxTokens/BlockTokens)
	blocks := make([]uint64, len(lead), max(size, len(lead)))
	copy(blocks, lead)
	return &session{
		key:      ss.source + "/" + strconv.Itoa(ss.started),
		model:    model,
		priority: priority,
		blocks:   blocks,
		content:  mix(ss.salt, uint64(ss.started)),
		left:     left,
	}
}

// turn records a turn of s at t with the given prompt and output lengths
// and returns the turn's Prefix: the full blocks of its prompt, all of
// which the next turn shares. The session is queued again if turns are
// left.
func (ss *sessions) turn(r *rand.Rand, s *session, t float64, prompt, output int) []uint64 {
	s.prompt, s.output = prompt, output
	s.blocks = extendBlocks(s.blocks, s.content, prompt)
	s.left--
	if s.left > 0 {
		s.due = t + ss.think*(0.5+r.Float64())
		heap.Push(&ss.open, s)
	}
	n := prompt / BlockTokens
	return s.blocks[:n:n]
}

// sessionHeap is a min-heap of sessions by due time.
type sessionHeap []*session

func (h sessionHeap) Len() int           { return len(h) }
func (h sessionHeap) Less(i, j int) bool { return h[i].due < h[j].due }
func (h sessionHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *sessionHeap) Push(x any)        { *h = append(*h, x.(*session)) }

func (h *sessionHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return s
}
