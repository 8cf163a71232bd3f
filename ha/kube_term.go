package ha

import (
	"context"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// lead runs one term on the Lease held (acquired by a request sent at
// sent): numbered after the version in force, renewed every D/4, ended
// when a renewal is refused because another replica wrote the Lease,
// when a later term, another Lease or none is seen, when no write of the
// term has succeeded for D*2/3 (a timer: a request that hangs does not
// hold the term), when ctx is done or Lead returns.
func (e *election) lead(ctx context.Context, held *coordinationv1.Lease, sent time.Time) error {
	r := e.b.r
	t := &term{key: held.Name, rev: int64(i32(held.Spec.LeaseTransitions))}
	if rec, err := decodeRecord([]byte(held.Annotations[annotCurrent])); err == nil {
		t.nextSeq, t.published = rec.Seq+1, rec.Version
	}
	e.mu.Lock()
	e.mine, e.mineSent = held, sent
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.mine = nil
		e.mu.Unlock()
	}()
	deadline := r.ttl * 2 / 3
	return r.runTerm(ctx, t, func(ctx context.Context, cancel context.CancelCauseFunc) {
		// A Lease of a later term (its transitions count is higher: every
		// acquisition raises it, so an event older than this term's
		// acquisition never is), another Lease (recreated: a new UID) or
		// none ends this one at once, not at the next renewal.
		e.mu.Lock()
		e.endTerm = func(l *coordinationv1.Lease) {
			switch {
			case l == nil:
				cancel(fmt.Errorf("%w: the Lease was deleted", errDeposed))
			case l.UID != held.UID:
				cancel(fmt.Errorf("%w: the Lease was replaced", errDeposed))
			case int64(i32(l.Spec.LeaseTransitions)) > t.rev:
				cancel(fmt.Errorf("%w: the Lease is held by %s in term %d", errDeposed, replicaOf(str(l.Spec.HolderIdentity)), i32(l.Spec.LeaseTransitions)))
			}
		}
		if e.seen != nil {
			e.endTerm(e.seen)
		}
		e.mu.Unlock()
		defer func() {
			e.mu.Lock()
			e.endTerm = nil
			e.mu.Unlock()
		}()
		// The renewal deadline, checked by a timer against the last write
		// that succeeded (renewals and publications alike).
		var timer *time.Timer // guarded by e.mu
		check := func() {
			e.mu.Lock()
			defer e.mu.Unlock()
			left := deadline - e.b.now().Sub(e.mineSent)
			if left <= 0 {
				cancel(errRenewDeadline)
				return
			}
			timer.Reset(left)
		}
		e.mu.Lock()
		timer = time.AfterFunc(deadline, check)
		e.mu.Unlock()
		defer func() {
			e.mu.Lock()
			timer.Stop()
			e.mu.Unlock()
		}()
		tick := time.NewTicker(r.ttl / 4)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			e.mu.Lock()
			until := e.mineSent.Add(deadline)
			e.mu.Unlock()
			rctx, rcancel := context.WithDeadline(ctx, until) // a renewal never outlives the term
			err := e.update(rctx, t, func(*coordinationv1.Lease) {})
			rcancel()
			switch {
			case err == nil:
			case errors.Is(err, ErrFenced):
				cancel(fmt.Errorf("%w: %w", errDeposed, err))
				return
			default:
				r.log.DebugContext(ctx, "Lease: renewal failed", "err", err)
			}
		}
	})
}

// update applies change to the Lease as this replica last wrote it,
// with a new renewTime (every write of a term renews it), and writes it,
// fenced: the API server applies it only if nobody else wrote the Lease
// since. When someone did (an operator's annotation, a concurrent write
// of this term), it reads the Lease again and retries while it still
// names t (this process, t's transitions); else the term is over
// (ErrFenced).
func (e *election) update(ctx context.Context, t *term, change func(l *coordinationv1.Lease)) error {
	const tries = 5
	for try := 0; ; try++ {
		e.mu.Lock()
		base := e.mine
		e.mu.Unlock()
		if base == nil || !names(base, e.id, t.rev) {
			return fmt.Errorf("%w: this replica's last write of the Lease does not name its term", ErrFenced)
		}
		next := base.DeepCopy()
		change(next)
		sent := e.b.now()
		renew := metav1.NewMicroTime(sent)
		next.Spec.RenewTime = &renew
		out, err := e.b.writeLease(ctx, next, false)
		if err == nil {
			e.mu.Lock()
			if e.mine != nil {
				e.mine, e.mineSent = out, sent
			}
			e.mu.Unlock()
			return nil
		}
		if !apierrors.IsConflict(err) {
			return err
		}
		cur, gerr := e.b.getLease(ctx)
		if gerr != nil {
			return gerr
		}
		e.see(cur)
		if !names(cur, e.id, t.rev) || cur.UID != base.UID {
			return fmt.Errorf("%w: the Lease is held by %s in term %d", ErrFenced, replicaOf(str(cur.Spec.HolderIdentity)), i32(cur.Spec.LeaseTransitions))
		}
		if try == tries-1 {
			return fmt.Errorf("the Lease %s/%s: %d conflicting writes in a row: %w", e.b.ns, e.b.lease, tries, err)
		}
		e.mu.Lock()
		if e.mine != nil {
			e.mine = cur
		}
		e.mu.Unlock()
	}
}

// names reports whether l is held by identity id in term transitions.
func names(l *coordinationv1.Lease, id string, transitions int64) bool {
	return str(l.Spec.HolderIdentity) == id && int64(i32(l.Spec.LeaseTransitions)) == transitions
}

// release gives the Lease up on the way out (within ha.dial_timeout), as
// client-go's ReleaseOnCancel does: no holder, a duration of one second.
// Candidates watching it take it at once. It is a write of the term
// that ended, so it is refused if another replica has taken the Lease.
func (e *election) release(ctx context.Context) {
	e.mu.Lock()
	base := e.mine
	e.mu.Unlock()
	if base == nil {
		base = e.seen
	}
	if base == nil || str(base.Spec.HolderIdentity) != e.id {
		return // only this process's own hold is released
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.b.r.timeout)
	defer cancel()
	next := base.DeepCopy()
	one := int32(1)
	now := metav1.NewMicroTime(e.b.now())
	next.Spec.HolderIdentity, next.Spec.LeaseDurationSeconds, next.Spec.RenewTime = nil, &one, &now
	if _, err := e.b.writeLease(rctx, next, false); err != nil {
		e.b.r.log.WarnContext(ctx, "Lease: could not release it on the way out; another replica takes it once it expires", "err", err)
	}
}

// safe reports whether no other replica can have taken the Lease from
// term t yet: this replica's last write of it was sent less than a third
// of its duration ago (another replica takes it a whole duration after
// it saw that write). Deletions that another term's publications could
// need are made only while it holds.
func (e *election) safe(t *term) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.mine != nil && names(e.mine, e.id, t.rev) && e.b.now().Sub(e.mineSent) < e.b.r.ttl/3
}

// leaseOf is the Lease as the term's leader last wrote it, if it still
// leads in term t.
func (e *election) leaseOf(t *term) (*coordinationv1.Lease, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mine == nil || !names(e.mine, e.id, t.rev) {
		return nil, false
	}
	return e.mine, true
}
