package extproc

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/tap"
)

// idleBound bounds how long Envoy may owe a message on a stream
// (extproc.stream_idle_timeout). The serving loop tells it what it waits
// for before each Recv and that Recv returned after it.
type idleBound interface {
	// waitFor notes that the stream now waits for st; awaitResponse is
	// not bounded (a generation may take long).
	waitFor(st stage)
	// received notes that Recv returned; false means the bound ended the
	// stream first (Process answers).
	received() bool
}

var _ idleBound = (*watch)(nil)

// streamCtx is the context streamTap gives an ext_proc stream: the
// transport's, which the idle bound may cancel. gRPC reports a Recv
// ended by a cancelled stream context to Envoy at once, as the stream's
// status, from the context's Err: DEADLINE_EXCEEDED then (the context
// deadline exceeded message; the trailer idleTrailer says what Envoy
// owed), CANCELLED when the stream ends otherwise.
type streamCtx struct {
	context.Context // context.WithCancelCause of the transport's
	cancel          context.CancelCauseFunc
}

// errIdle is the cause of a stream cancelled by its idle bound.
var errIdle = errors.New("extproc: the stream was idle for extproc.stream_idle_timeout")

func (c *streamCtx) Err() error {
	err := c.Context.Err()
	if err != nil && errors.Is(context.Cause(c.Context), errIdle) {
		return context.DeadlineExceeded
	}
	return err //nolint:wrapcheck // a context's own error
}

func (c *streamCtx) Value(key any) any {
	if key == (streamCtxKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// streamCtxKey finds a stream's *streamCtx in its context and those
// derived from it.
type streamCtxKey struct{}

// streamTap gives every ext_proc stream a context ILB can cancel
// (streamCtx), which ends a Recv blocked on it: the idle bound then
// needs no goroutine of its own. It runs on the connection's reader
// goroutine, before the stream's handler; other methods keep their
// context.
func streamTap(ctx context.Context, info *tap.Info) (context.Context, error) {
	if info.FullMethodName != extprocv3.ExternalProcessor_Process_FullMethodName {
		return ctx, nil
	}
	inner, cancel := context.WithCancelCause(ctx)
	return &streamCtx{Context: inner, cancel: cancel}, nil
}

// idleTrailer is the trailer metadata key that says, when the idle bound
// ended a stream served with streamTap, what Envoy owed (the status
// message of the stream cannot: gRPC sends the context's).
const idleTrailer = "x-ilb-error"

// watch is the idle bound of a stream served on a goroutine of its own,
// which its handler's goroutine watches (Process): by when (Unix
// nanoseconds) Envoy owes the next message, or watchBusy while a message
// is handled, or watchNone once no bound applies.
type watch struct {
	idle     time.Duration
	deadline atomic.Int64
	stage    atomic.Uint32
}

const (
	watchBusy int64 = 0
	watchNone int64 = -1
)

func (w *watch) waitFor(st stage) {
	w.stage.Store(uint32(st))
	if st == awaitResponse {
		w.deadline.Store(watchNone)
		return
	}
	w.deadline.Store(time.Now().Add(w.idle).UnixNano())
}

// received marks the stream busy unless no bound applies any more; the
// watcher ends the stream itself, so this never does.
func (w *watch) received() bool {
	if w.deadline.Load() != watchNone {
		w.deadline.Store(watchBusy)
	}
	return true
}
