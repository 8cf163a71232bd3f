package ha

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// term is one leadership: it holds while the election key it won keeps
// the create revision it was written with.
type term struct {
	key string // the leader's election key
	rev int64  // its create revision: every publication compares it
	ctx context.Context

	mu        sync.Mutex // serialises publications
	nextSeq   uint64
	published string // the version in force in etcd (this term's last publication)
}

// guard is the comparison every write of the term carries: etcd applies
// the write only while the term's election key exists with its create
// revision, i.e. while this replica leads.
func (t *term) guard() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(t.key), "=", t.rev)
}

// Errors of a publication.
var (
	// ErrNotLeader: this replica does not lead (any more).
	ErrNotLeader = errors.New("this replica is not the leader")
	// ErrFenced: etcd refused a publication because its term's election
	// key is gone: another replica leads, or will.
	ErrFenced    = errors.New("etcd refused the publication: this replica's term has ended")
	errLeadEnded = errors.New("the controller stopped leading")
	errDeposed   = errors.New("the election key was deleted")
)

// runSessions keeps a session (a lease of ha.lease_ttl) and campaigns
// with it until ctx is done; a lost session is replaced.
func (r *Replica) runSessions(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		s, err := r.newSession(ctx)
		if err != nil {
			r.log.DebugContext(ctx, "etcd session: cannot start", "err", err, "retry_in", backoff)
			if !wait(ctx, backoff) {
				return nil
			}
			backoff = min(2*backoff, r.ttl)
			continue
		}
		backoff = 100 * time.Millisecond
		r.session.Store(s)
		r.log.InfoContext(ctx, "etcd session started", "lease", fmt.Sprintf("%x", s.Lease()), "ttl", r.ttl)
		r.campaign(ctx, s)
		r.session.Store(nil)
		if done(ctx) {
			r.closeSession(ctx, s)
			return nil
		}
		r.log.WarnContext(ctx, "etcd session lost: its lease was not renewed in time", "lease", fmt.Sprintf("%x", s.Lease()))
		// Revoke it in case etcd still holds it (it expires anyway): its
		// keys, this replica's demand share among them, go now.
		r.closeSession(ctx, s)
	}
}

// newSession grants a lease (within ha.dial_timeout) and keeps it alive
// until ctx is done or etcd stops renewing it.
func (r *Replica) newSession(ctx context.Context) (*concurrency.Session, error) {
	tctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	lease, err := r.cli.Grant(tctx, int64(r.ttl/time.Second))
	if err != nil {
		return nil, fmt.Errorf("grant a lease: %w", err)
	}
	s, err := concurrency.NewSession(r.cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(int(r.ttl/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("keep the lease alive: %w", err)
	}
	return s, nil
}

// closeSession resigns and revokes the lease on the way out, on a
// context of its own (ctx is done), within ha.dial_timeout.
func (r *Replica) closeSession(ctx context.Context, s *concurrency.Session) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.timeout)
	defer cancel()
	if _, err := r.cli.Revoke(cctx, s.Lease()); err != nil {
		r.log.WarnContext(ctx, "etcd session: could not revoke the lease on the way out; it expires within its TTL", "err", err)
	}
}

// campaign runs for election and leads, again and again, while s lives.
func (r *Replica) campaign(ctx context.Context, s *concurrency.Session) {
	if r.o.Lead == nil {
		<-s.Done()
		return
	}
	backoff := 100 * time.Millisecond
	for s.Ctx().Err() == nil {
		e := concurrency.NewElection(s, r.keys.election())
		if err := e.Campaign(s.Ctx(), r.name); err != nil {
			if s.Ctx().Err() != nil {
				return
			}
			r.log.DebugContext(ctx, "campaign failed", "err", err, "retry_in", backoff)
			if !wait(s.Ctx(), backoff) {
				return
			}
			backoff = min(2*backoff, r.ttl)
			continue
		}
		backoff = 100 * time.Millisecond
		cause := r.lead(s, e)
		if s.Ctx().Err() != nil {
			return
		}
		// The term ended while the session lives: Lead returned, or the
		// key was deleted. Resign (a no-op when the key is gone) and let
		// another replica lead for a while.
		rctx, cancel := context.WithTimeout(s.Ctx(), r.timeout)
		_ = e.Resign(rctx)
		cancel()
		if errors.Is(cause, errLeadEnded) && !wait(s.Ctx(), r.ttl) {
			return
		}
	}
}

// lead is one term: it runs Lead, watches the election key and
// republishes, until the session ends, the key is deleted or Lead
// returns; it returns why the term ended.
func (r *Replica) lead(s *concurrency.Session, e *concurrency.Election) error {
	ctx, cancel := context.WithCancelCause(s.Ctx())
	defer cancel(nil)
	t := &term{key: e.Key(), rev: e.Rev(), ctx: ctx}
	// Check the key is still there (Campaign does not look again once the
	// keys before it are gone) and number the term's publications after
	// the version in force.
	for {
		tctx, tcancel := context.WithTimeout(ctx, r.timeout)
		resp, err := r.cli.Txn(tctx).Then(clientv3.OpGet(t.key), clientv3.OpGet(r.keys.current())).Commit()
		tcancel()
		if err == nil {
			if key := resp.Responses[0].GetResponseRange().GetKvs(); len(key) == 0 || key[0].CreateRevision != t.rev {
				return errDeposed
			}
			if cur := resp.Responses[1].GetResponseRange().GetKvs(); len(cur) > 0 {
				if rec, err := decodeRecord(cur[0].Value); err == nil {
					t.nextSeq, t.published = rec.Seq+1, rec.Version
				}
			}
			break
		}
		if !wait(ctx, 200*time.Millisecond) {
			return context.Cause(ctx)
		}
	}
	r.term.Store(t)
	r.m.leader.Set(1)
	r.m.terms.Inc()
	r.log.InfoContext(ctx, "leading: this replica runs the controller and publishes", "key", t.key, "revision", t.rev)
	var wg sync.WaitGroup
	wg.Go(func() {
		err := r.o.Lead(ctx)
		cancel(fmt.Errorf("%w: %w", errLeadEnded, err))
	})
	wg.Go(func() { r.watchTerm(ctx, t, e.Header().GetRevision(), cancel) })
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

// watchTerm ends the term (cancel) when its election key is deleted.
func (r *Replica) watchTerm(ctx context.Context, t *term, from int64, cancel context.CancelCauseFunc) {
	for ctx.Err() == nil {
		wch := r.cli.Watch(clientv3.WithRequireLeader(ctx), t.key, clientv3.WithRev(from+1))
		for resp := range wch {
			if err := resp.Err(); err != nil {
				break
			}
			for _, ev := range resp.Events {
				if ev.Type == mvccpb.DELETE {
					cancel(errDeposed)
					return
				}
			}
			from = resp.Header.GetRevision()
		}
		// The watch broke (no leader, compaction, a member down): check
		// the key, then watch again from what was read.
		tctx, tcancel := context.WithTimeout(ctx, r.timeout)
		resp, err := r.cli.Get(tctx, t.key)
		tcancel()
		if err == nil {
			if len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != t.rev {
				cancel(errDeposed)
				return
			}
			from = resp.Header.GetRevision()
		}
		if !wait(ctx, 200*time.Millisecond) {
			return
		}
	}
}

// republishLoop publishes what the controller kept but etcd does not
// hold (a controller that led before, in an earlier term, and computes
// again the version it published then).
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
