package envoysim

import (
	"errors"
	"io"
	"sync"
)

// errBodyGone is returned by a request body reader that can no longer
// deliver the body: it was closed, or the bytes it needs were not kept.
var errBodyGone = errors.New("request body no longer available")

// bodyChunk is the size of a downstream body read.
const bodyChunk = 32 << 10

// requestBody is the downstream request body on its way upstream. Like the
// connection manager, it reads the downstream body on its own (a pump
// goroutine, reading on demand), so that an attempt can be abandoned while
// the client is still sending. While retries are possible the router keeps
// what it read so that a retry can replay it (Filter::decodeData:
// callbacks_->addDecodedData); once the kept body would exceed the
// listener's per_connection_buffer_limit_bytes (decoderBufferLimit, checked
// with >), it stops keeping it and retries are abandoned for the request
// (retry_or_shadow_abandoned). Each attempt reads the body through its own
// reader.
type requestBody struct {
	src   io.Reader // nil: no body
	limit int
	touch func() // activity for the stream idle timer

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced when data arrives or the body ends
	need      chan struct{} // asks the pump for the next chunk
	pumping   bool
	stopped   bool
	complete  bool   // the downstream body was received before the router ran
	buf       []byte // body bytes [base, read)
	base      int
	read      int
	eof       bool
	err       error
	buffering bool
	abandoned bool
}

func newRequestBody(src io.Reader, limit int, buffering bool, touch func()) *requestBody {
	return &requestBody{
		src: src, limit: limit, buffering: buffering, touch: touch, eof: src == nil,
		changed: make(chan struct{}), need: make(chan struct{}, 1),
	}
}

// received reports whether the whole downstream body was received
// (FilterManager::remoteDecodeComplete).
func (b *requestBody) received() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.complete || b.eof
}

// takeAbandoned reports, once, that keeping the body for retries was
// abandoned.
func (b *requestBody) takeAbandoned() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	a := b.abandoned
	b.abandoned = false
	return a
}

// stop ends the pump once the router is done with the body (a pending
// downstream read ends with the request); later reads fail.
func (b *requestBody) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.stopped {
		b.stopped = true
		close(b.need)
	}
}

// stopBuffering stops keeping the body when retries are over.
func (b *requestBody) stopBuffering() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buffering = false
}

// pump reads the downstream body chunk by chunk as readers ask for it,
// until its end, a read error or stop (the server ends a pending read when
// the request ends).
func (b *requestBody) pump() {
	for range b.need {
		p := make([]byte, bodyChunk)
		n, err := b.src.Read(p)
		if n > 0 {
			b.touch()
		}
		b.mu.Lock()
		b.add(p[:n])
		switch {
		case errors.Is(err, io.EOF):
			b.eof = true
		case err != nil:
			b.err = err
		}
		close(b.changed)
		b.changed = make(chan struct{})
		done := b.eof || b.err != nil
		b.mu.Unlock()
		if done {
			return
		}
	}
}

// add appends a chunk, keeping the whole body while buffering.
func (b *requestBody) add(p []byte) {
	if len(p) == 0 {
		return
	}
	if b.buffering && b.read+len(p) > b.limit {
		b.buffering, b.abandoned = false, true
	}
	if b.buffering {
		b.buf = append(b.buf, p...)
	} else {
		b.buf, b.base = p, b.read
	}
	b.read += len(p)
}

// reader returns a reader of the whole body for one attempt; it stops
// when done is closed (the attempt ended).
func (b *requestBody) reader(done <-chan struct{}) *bodyReader {
	return &bodyReader{b: b, closed: make(chan struct{}), done: done}
}

// bodyReader is one attempt's view of the request body.
type bodyReader struct {
	b      *requestBody
	pos    int
	closed chan struct{}
	done   <-chan struct{}
	once   sync.Once
}

// Read implements io.Reader. It waits for the pump, or returns when the
// reader is closed or its attempt ended.
func (r *bodyReader) Read(p []byte) (int, error) {
	b := r.b
	for {
		b.mu.Lock()
		select {
		case <-r.closed:
			b.mu.Unlock()
			return 0, errBodyGone
		case <-r.done:
			b.mu.Unlock()
			return 0, errBodyGone
		default:
		}
		if b.stopped {
			b.mu.Unlock()
			return 0, errBodyGone
		}
		switch {
		case r.pos < b.base:
			b.mu.Unlock()
			return 0, errBodyGone // not kept: only possible once retries are off
		case r.pos < b.read:
			n := copy(p, b.buf[r.pos-b.base:])
			r.pos += n
			b.mu.Unlock()
			return n, nil
		case b.eof:
			b.mu.Unlock()
			return 0, io.EOF
		case b.err != nil:
			err := b.err
			b.mu.Unlock()
			return 0, err
		}
		if !b.pumping {
			b.pumping = true
			go b.pump()
		}
		select {
		case b.need <- struct{}{}:
		default:
		}
		changed := b.changed
		b.mu.Unlock()
		select {
		case <-changed:
		case <-r.closed:
			return 0, errBodyGone
		case <-r.done:
			return 0, errBodyGone
		}
	}
}

// Close implements io.Closer; the transport may call it from another
// goroutine while Read waits.
func (r *bodyReader) Close() error {
	r.once.Do(func() { close(r.closed) })
	return nil
}
