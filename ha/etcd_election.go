package ha

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// guard is the comparison every write of an etcd term carries: etcd
// applies the write only while the term's election key exists with its
// create revision, i.e. while this replica leads.
func (t *term) guard() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(t.key), "=", t.rev)
}

// runSessions keeps a session (a lease of ha.lease_ttl) and campaigns
// with it until ctx is done; a lost session is replaced.
func (b *etcdBackend) runSessions(ctx context.Context) error {
	r := b.r
	backoff := 100 * time.Millisecond
	for {
		s, err := b.newSession(ctx)
		if err != nil {
			r.log.DebugContext(ctx, "etcd session: cannot start", "err", err, "retry_in", backoff)
			if !wait(ctx, backoff) {
				return nil
			}
			backoff = min(2*backoff, r.ttl)
			continue
		}
		backoff = 100 * time.Millisecond
		b.session.Store(s)
		r.log.InfoContext(ctx, "etcd session started", "lease", fmt.Sprintf("%x", s.Lease()), "ttl", r.ttl)
		b.campaign(ctx, s)
		b.session.Store(nil)
		if done(ctx) {
			b.closeSession(ctx, s)
			return nil
		}
		r.log.WarnContext(ctx, "etcd session lost: its lease was not renewed in time", "lease", fmt.Sprintf("%x", s.Lease()))
		// Revoke it in case etcd still holds it (it expires anyway): its
		// keys, this replica's demand share among them, go now.
		b.closeSession(ctx, s)
	}
}

// newSession grants a lease (within ha.dial_timeout) and keeps it alive
// until ctx is done or etcd stops renewing it.
func (b *etcdBackend) newSession(ctx context.Context) (*concurrency.Session, error) {
	r := b.r
	tctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	lease, err := b.cli.Grant(tctx, int64(r.ttl/time.Second))
	if err != nil {
		return nil, fmt.Errorf("grant a lease: %w", err)
	}
	s, err := concurrency.NewSession(b.cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(int(r.ttl/time.Second)), concurrency.WithContext(ctx))
	if err != nil {
		return nil, fmt.Errorf("keep the lease alive: %w", err)
	}
	return s, nil
}

// closeSession revokes the lease on the way out, on a context of its own
// (ctx is done), within ha.dial_timeout.
func (b *etcdBackend) closeSession(ctx context.Context, s *concurrency.Session) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.r.timeout)
	defer cancel()
	if _, err := b.cli.Revoke(cctx, s.Lease()); err != nil {
		b.r.log.WarnContext(ctx, "etcd session: could not revoke the lease on the way out; it expires within its TTL", "err", err)
	}
}

// campaign runs for election and leads, again and again, while s lives.
func (b *etcdBackend) campaign(ctx context.Context, s *concurrency.Session) {
	r := b.r
	if r.o.Lead == nil {
		<-s.Done()
		return
	}
	backoff := 100 * time.Millisecond
	for s.Ctx().Err() == nil {
		e := concurrency.NewElection(s, b.keys.election())
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
		cause := b.lead(s, e)
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

// lead checks the election key won is still there (Campaign does not
// look again once the keys before it are gone), numbers the term's
// publications after the version in force, and runs the term until the
// session ends, the key is deleted or Lead returns; it returns why the
// term ended.
func (b *etcdBackend) lead(s *concurrency.Session, e *concurrency.Election) error {
	r := b.r
	ctx := s.Ctx()
	t := &term{key: e.Key(), rev: e.Rev()}
	for {
		tctx, tcancel := context.WithTimeout(ctx, r.timeout)
		resp, err := b.cli.Txn(tctx).Then(clientv3.OpGet(t.key), clientv3.OpGet(b.keys.current())).Commit()
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
	from := e.Header().GetRevision()
	return r.runTerm(ctx, t, func(ctx context.Context, cancel context.CancelCauseFunc) {
		b.watchTerm(ctx, t, from, cancel)
	})
}

// watchTerm ends the term (cancel) when its election key is deleted.
func (b *etcdBackend) watchTerm(ctx context.Context, t *term, from int64, cancel context.CancelCauseFunc) {
	for ctx.Err() == nil {
		wch := b.cli.Watch(clientv3.WithRequireLeader(ctx), t.key, clientv3.WithRev(from+1))
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
		tctx, tcancel := context.WithTimeout(ctx, b.r.timeout)
		resp, err := b.cli.Get(tctx, t.key)
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
