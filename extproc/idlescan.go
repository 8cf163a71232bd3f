package extproc

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// idleScan is the idle bound of every stream served on its handler's
// goroutine (streamTap gave it a context ILB may cancel): each stream's
// bound (scanned) says by when Envoy owes its next message, and one
// goroutine looks at them all every tick and ends those past it. A
// message costs its stream two atomic stores and a clock read, not a
// runtime timer (a timer per stream, armed and stopped at every message,
// was a tenth of ext_proc's CPU per request). A stream ends at most a
// tick after its bound: ticks are an eighth of extproc.stream_idle_timeout
// (between 10 ms and 1 s).
//
// The scanning goroutine runs while streams are registered and stops
// when the last one leaves; the next registration starts it again.
type idleScan struct {
	mu      sync.Mutex
	streams map[*scanned]struct{}
	running bool
}

// scanned is one stream's idle bound.
type scanned struct {
	idle    time.Duration
	ctx     *streamCtx
	stream  grpc.ServerStream
	expired prometheus.Counter // counts the stream's end, before the status goes out
	// deadline is when Envoy owes the next message (Unix nanoseconds),
	// scanNone while it owes none (a message is handled, or the response
	// is awaited), scanFired once the scan ended the stream.
	deadline atomic.Int64
	waiting  atomic.Uint32 // the stage the stream waits for
}

const (
	scanNone  int64 = 0
	scanFired int64 = -1
)

var _ idleBound = (*scanned)(nil)

// tick is how often streams of idle bound idle are looked at.
func scanTick(idle time.Duration) time.Duration {
	return min(max(idle/8, 10*time.Millisecond), time.Second)
}

// add registers b, starting the scan if none runs.
func (s *idleScan) add(b *scanned) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streams == nil {
		s.streams = map[*scanned]struct{}{}
	}
	s.streams[b] = struct{}{}
	if !s.running {
		s.running = true
		go s.run(scanTick(b.idle))
	}
}

// remove unregisters b: once it returns, the scan no longer touches b.
func (s *idleScan) remove(b *scanned) {
	s.mu.Lock()
	delete(s.streams, b)
	s.mu.Unlock()
}

// run scans every tick until no stream is registered.
func (s *idleScan) run(tick time.Duration) {
	t := time.NewTicker(tick)
	defer t.Stop()
	var due []*scanned
	for range t.C {
		now := time.Now().UnixNano() // the streams' deadlines are on the wall clock, as timers are
		s.mu.Lock()
		if len(s.streams) == 0 {
			s.running = false
			s.mu.Unlock()
			return
		}
		due = due[:0]
		for b := range s.streams {
			if d := b.deadline.Load(); d > scanNone && d <= now && b.deadline.CompareAndSwap(d, scanFired) {
				due = append(due, b)
			}
		}
		// Fired under mu: once remove returned, no fire runs or will run
		// for that stream, whose state (its exchange's) may serve another
		// stream next. A fire waits for nothing a stream holds while it
		// removes its bound.
		for _, b := range due {
			b.fire()
		}
		clear(due)
		s.mu.Unlock()
	}
}

func (b *scanned) waitFor(st stage) {
	if st == awaitResponse {
		b.deadline.Store(scanNone) // a generation may take long
		return
	}
	b.waiting.Store(uint32(st))
	b.deadline.Store(time.Now().Add(b.idle).UnixNano())
}

// fire ends the stream: counted and its trailer set first, as gRPC sends
// the status as soon as the context is cancelled.
func (b *scanned) fire() {
	b.expired.Inc()
	b.stream.SetTrailer(metadata.Pairs(idleTrailer, idleMessage(stage(b.waiting.Load()), b.idle)))
	b.ctx.cancel(errIdle)
}

// received marks the stream busy; false when the scan ended it first.
func (b *scanned) received() bool {
	return b.deadline.Swap(scanNone) != scanFired
}

// end reports whether the scan ended the stream, and what Envoy owed
// then; the stream owes nothing after it.
func (b *scanned) end() (stage, bool) {
	return stage(b.waiting.Load()), b.deadline.Swap(scanNone) == scanFired
}
