package ha

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/internal/bound"
	"github.com/ilbproject/ilb/weights"
)

// Publisher is the leader's controller sink: it publishes each new
// version to the backend. Prepare fails on a replica that does not lead, and
// the backend refuses a publication of a term that has ended (ErrFenced): the
// controller then keeps its last version, fail-static ("rejected").
type Publisher struct{ r *Replica }

var _ controller.Sink = (*Publisher)(nil)

// Publisher returns the sink the leader's controller publishes through.
func (r *Replica) Publisher() *Publisher { return &Publisher{r: r} }

// Prepare publishes w (its content once under its version, then the
// record of the version in force and of the history, in transactions
// guarded by the leadership); its commit does nothing more. The local
// sinks install w through the backend, like every replica's.
func (p *Publisher) Prepare(ctx context.Context, w *weights.Weights) (func(), error) {
	t := p.r.term.Load()
	if t == nil {
		return nil, fmt.Errorf("ha: publish %s: %w", w.Version(), ErrNotLeader)
	}
	if err := p.r.publish(ctx, t, w); err != nil {
		return nil, err
	}
	return func() {}, nil
}

// Refresh takes the weights of a tick whose version did not change: the
// local sinks get the fresh demand and explanations, and a version the backend
// does not hold (the controller kept it from an earlier term) is
// published again.
func (p *Publisher) Refresh(w *weights.Weights) {
	t := p.r.term.Load()
	if t == nil {
		return
	}
	t.mu.Lock()
	stale := t.published != w.Version()
	t.mu.Unlock()
	if !stale {
		p.r.refresh(w)
		return
	}
	select { // latest wins
	case <-p.r.republish:
	default:
	}
	p.r.republish <- w
}

// publish writes w as the term's next publication.
func (r *Replica) publish(ctx context.Context, t *term, w *weights.Weights) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx.Err() != nil {
		r.m.publishes.WithLabelValues("fenced").Inc()
		return fmt.Errorf("ha: publish %s: %w", w.Version(), ErrNotLeader)
	}
	if t.published == w.Version() {
		// The version in force (a new term's first tick computes it
		// again): nothing to write, fresh weights for the local sinks.
		r.refresh(w)
		return nil
	}
	// A write in flight on a member that fails is not replayed by the
	// client: write again (whole: a lost answer to a committed write
	// finds the content there and rewrites the same records).
	err := r.write(ctx, t, w)
	for try := 1; try < 3 && err != nil && !errors.Is(err, ErrFenced) && wait(ctx, 100*time.Millisecond); try++ {
		err = r.write(ctx, t, w)
	}
	switch {
	case err == nil:
		r.m.publishes.WithLabelValues("published").Inc()
		r.log.InfoContext(ctx, "weights published", "version", w.Version(), "seq", t.nextSeq-1, "previous", t.published)
		t.published = w.Version()
		r.published.Store(w)
		r.wakeSync()
		r.b.collect(ctx, t)
		return nil
	case errors.Is(err, ErrFenced):
		r.m.publishes.WithLabelValues("fenced").Inc()
		r.log.WarnContext(ctx, "publication refused: this replica no longer leads", "version", w.Version())
	default:
		r.m.publishes.WithLabelValues("failed").Inc()
		r.log.WarnContext(ctx, "publication failed", "version", w.Version(), "err", err)
	}
	return fmt.Errorf("ha: publish %s: %w", w.Version(), err)
}

// write writes w as the term's next publication (t.mu held).
func (r *Replica) write(ctx context.Context, t *term, w *weights.Weights) error {
	rec := record{
		Version: w.Version(), Seq: t.nextSeq, Published: r.now(), Leader: r.name, Config: r.cfgHash,
		Policy: w.Policy(), Computed: w.Computed(), Status: bound.String(w.Status(), maxStatusBytes),
	}
	if err := r.b.write(ctx, t, rec, w); err != nil {
		return err
	}
	t.nextSeq++
	return nil
}
