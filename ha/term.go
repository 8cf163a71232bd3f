package ha

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// term is one leadership. key and rev name it in the backend: with etcd
// the leader's election key and its create revision (every publication
// compares it); with Kubernetes the Lease's name and its transitions
// count when this replica acquired it (every publication is an update of
// that Lease, refused once another holder wrote it).
type term struct {
	key string
	rev int64
	ctx context.Context

	mu        sync.Mutex // serialises publications
	nextSeq   uint64
	published string // the version in force (this term's last publication)
}

// Errors of a publication.
var (
	// ErrNotLeader: this replica does not lead (any more).
	ErrNotLeader = errors.New("this replica is not the leader")
	// ErrFenced: the backend refused a publication because its term has
	// ended: another replica leads, or will.
	ErrFenced    = errors.New("the publication was refused: this replica's term has ended")
	errLeadEnded = errors.New("the controller stopped leading")
	errDeposed   = errors.New("the leadership was lost")
)

// runTerm is one term, once the backend has won it: it runs Lead,
// watch (the backend's check that the term holds, which cancels it when
// it does not) and the republish loop until ctx is done, the watch
// cancels or Lead returns; it returns why the term ended.
func (r *Replica) runTerm(ctx context.Context, t *term, watch func(ctx context.Context, cancel context.CancelCauseFunc)) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	t.ctx = ctx
	r.term.Store(t)
	r.m.leader.Set(1)
	r.m.terms.Inc()
	r.log.InfoContext(ctx, "leading: this replica runs the controller and publishes", "backend", r.b.kind(), "key", t.key, "term", t.rev)
	var wg sync.WaitGroup
	wg.Go(func() {
		err := r.o.Lead(ctx)
		cancel(fmt.Errorf("%w: %w", errLeadEnded, err))
	})
	wg.Go(func() { watch(ctx, cancel) })
	wg.Go(func() { r.republishLoop(ctx, t) })
	<-ctx.Done()
	// Stop publishing at once: Prepare reads the term. The gauge drops
	// first, so that whoever sees Leading false reads 0 there too.
	r.m.leader.Set(0)
	r.term.Store(nil)
	wg.Wait()
	cause := context.Cause(ctx)
	r.log.WarnContext(context.WithoutCancel(ctx), "no longer leading", "cause", cause)
	return cause
}

// republishLoop publishes what the controller kept but the backend does
// not hold (a controller that led before, in an earlier term, and
// computes again the version it published then).
func (r *Replica) republishLoop(ctx context.Context, t *term) {
	for {
		select {
		case <-ctx.Done():
			return
		case w := <-r.republish:
			t.mu.Lock()
			same := t.published == w.Version()
			t.mu.Unlock()
			if !same {
				_ = r.publish(ctx, t, w) // logged and counted
			}
		}
	}
}
