package ha

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// election is leader election on the Lease, as client-go's
// leaderelection does it (the holder renews the Lease; a candidate takes
// it once it has seen no renewal for the lease duration, by its own
// clock; every write is an update conditioned on the resourceVersion
// read), with two differences: candidates watch the Lease instead of
// polling it, so a takeover follows the expiry within the watch's
// latency rather than within up to two retry periods; and the term is
// fenced: every publication is an update of the Lease based on the
// leader's own last write, which the API server refuses once anyone
// else has written it (client-go's elector does not fence).
//
// Timing, with D the lease duration (ha.lease_ttl): the leader renews
// every D/4 and ends its term once D*2/3 has passed since the last
// renewal it sent that succeeded; a candidate takes over D after the
// last change it observed. A renewal is observed after it is sent, so
// the leader stops at least D/3 before anyone takes over, as long as the
// clocks run at one rate (they need not agree).
type election struct {
	b *kubeBackend
	// id is this process's holder identity: the replica's name and its
	// instance ("name_instance", as client-go's "hostname_uuid"), so that
	// a restarted process, or a second one of the same name, waits for
	// the Lease to expire instead of taking it from a live holder.
	id string

	mu sync.Mutex
	// seen is the newest Lease read or watched; observed is when its spec
	// last changed, by this replica's clock.
	seen     *coordinationv1.Lease
	observed time.Time
	// mine is the Lease as this replica's last successful write returned
	// it, while it leads (the base of every write of its term).
	mine *coordinationv1.Lease
	// mineSent is when the request that wrote mine was sent: every write
	// of a term renews the Lease (its renewTime), so no other replica
	// takes it before mineSent plus its duration.
	mineSent time.Time
	// deletedAt is when a Lease seen before was seen gone: candidates
	// wait a lease duration before creating it again.
	deletedAt time.Time
	changed   chan struct{} // poked when seen changes
	// endTerm ends the term this replica leads (nil while it does not)
	// once a Lease of a later term, another Lease (a new UID) or none is
	// seen (l nil: deleted).
	endTerm func(l *coordinationv1.Lease)
}

func (e *election) init(b *kubeBackend) {
	e.b, e.id = b, b.r.name+"_"+b.instance
	e.changed = make(chan struct{}, 1)
}

// replicaOf is the replica name of a holder identity ("" for none).
func replicaOf(holder string) string {
	name, _, _ := strings.Cut(holder, "_")
	return name
}

// Errors of a Kubernetes term.
var (
	errRenewDeadline = errors.New("the Lease was not renewed within two thirds of its duration")
)

// see notes l, read or watched; a change of its holder, renewal or
// transitions is dated now.
func (e *election) see(l *coordinationv1.Lease) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.seen != nil && e.seen.ResourceVersion == l.ResourceVersion {
		return
	}
	if e.seen == nil || !sameSpec(e.seen.Spec, l.Spec) {
		e.observed = e.b.now()
	}
	old := e.seen
	e.seen = l
	if e.endTerm != nil {
		e.endTerm(l)
	}
	if old == nil || old.Annotations[annotCurrent] != l.Annotations[annotCurrent] {
		e.b.r.wakeSync()
	}
	select {
	case e.changed <- struct{}{}:
	default:
	}
}

// seenUID is the UID of the Lease seen ("" when none).
func (e *election) seenUID() types.UID {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.seen == nil {
		return ""
	}
	return e.seen.UID
}

// forget notes the Lease is gone: a term on it ends, and a Lease seen
// before is created again only a lease duration later.
func (e *election) forget() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.seen != nil {
		e.deletedAt = e.b.now()
	}
	if e.endTerm != nil {
		e.endTerm(nil)
	}
	e.seen, e.observed = nil, e.b.now()
	select {
	case e.changed <- struct{}{}:
	default:
	}
}

func sameSpec(a, b coordinationv1.LeaseSpec) bool {
	return str(a.HolderIdentity) == str(b.HolderIdentity) && i32(a.LeaseTransitions) == i32(b.LeaseTransitions) &&
		micro(a.RenewTime).Equal(micro(b.RenewTime)) && i32(a.LeaseDurationSeconds) == i32(b.LeaseDurationSeconds)
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func i32(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

func micro(p *metav1.MicroTime) time.Time {
	if p == nil {
		return time.Time{}
	}
	return p.Time
}

// watch keeps seen current: a Reflector over the Lease alone (a field
// selector on its name), relisting on expiry, until ctx is done.
func (e *election) watch(ctx context.Context) {
	b := e.b
	lw := cache.NewFilteredListWatchFromClient(b.coord, "leases", b.ns, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", b.lease).String()
	})
	st := &funcStore{
		set: func(obj any) {
			if l, ok := obj.(*coordinationv1.Lease); ok && l.Name == b.lease {
				e.see(l)
			}
		},
		// A deletion of the Lease seen ends it; anything less certain (a
		// deletion of another instance, a tombstone, a list without it,
		// which may have been read before this replica created it and
		// be delivered after) is checked with a read first: an old list
		// ended a term just begun (under load, in TestDeposedLeaderIsFenced).
		del: func(obj any) {
			if l, ok := obj.(*coordinationv1.Lease); ok && e.seenUID() == l.UID {
				e.forget()
				return
			}
			e.refresh(ctx)
		},
		replace: func(list []any) {
			for _, obj := range list {
				if l, ok := obj.(*coordinationv1.Lease); ok && l.Name == b.lease {
					e.see(l)
					return
				}
			}
			e.refresh(ctx)
		},
	}
	runReflector(ctx, lw, &coordinationv1.Lease{}, st)
}

// state returns what campaign decides on: the Lease seen (nil: none),
// when it expires, and whether it is free for this replica: absent (a
// lease duration after it was deleted, at once if it never existed),
// released (no holder), held by this process, or expired by this
// replica's observation.
func (e *election) state() (l *coordinationv1.Lease, expires time.Time, free bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	l = e.seen
	now := e.b.now()
	if l == nil {
		expires = e.deletedAt.Add(e.b.r.ttl)
		return nil, expires, e.deletedAt.IsZero() || !now.Before(expires)
	}
	holder := str(l.Spec.HolderIdentity)
	d := time.Duration(i32(l.Spec.LeaseDurationSeconds)) * time.Second
	expires = e.observed.Add(d)
	return l, expires, holder == "" || holder == e.id || !now.Before(expires)
}

// campaign takes the Lease whenever it is free and leads with it, until
// ctx is done.
func (e *election) campaign(ctx context.Context) {
	r := e.b.r
	if r.o.Lead == nil {
		return
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		l, expires, free := e.state()
		if !free {
			t := time.NewTimer(max(time.Until(expires), 0) + 10*time.Millisecond)
			select {
			case <-ctx.Done():
			case <-e.changed:
			case <-t.C:
			}
			t.Stop()
			continue
		}
		sent := e.b.now()
		held, err := e.acquire(ctx, l)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
				r.log.WarnContext(ctx, "Lease: not allowed to take it: this replica cannot lead (give it get, list, watch, create and update on leases)", "err", err, "retry_in", backoff)
			} else {
				r.log.DebugContext(ctx, "Lease: cannot take it", "err", err, "retry_in", backoff)
			}
			if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
				e.refresh(ctx) // someone wrote first: look again at once
				continue
			}
			if !wait(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, r.ttl)
			continue
		}
		backoff = 100 * time.Millisecond
		cause := e.lead(ctx, held, sent)
		if ctx.Err() != nil {
			e.release(ctx)
			return
		}
		if errors.Is(cause, errLeadEnded) {
			// Lead returned: let another replica lead for a while.
			e.release(ctx)
			if !wait(ctx, r.ttl) {
				return
			}
		}
	}
}

// refresh reads the Lease into seen. A read that finds none while this
// replica leads is read again: the first may have been sent before this
// replica's own create of the Lease was committed and answered after it
// (the watcher and the campaign run concurrently), and a term just begun
// ended on it under load (TestLeaderAgainRepublishes). The second read is
// sent once the term began, so its create is visible to it.
func (e *election) refresh(ctx context.Context) {
	l, err := e.b.getLease(ctx)
	if isNotFound(err) && e.leading() {
		l, err = e.b.getLease(ctx)
	}
	switch {
	case err == nil:
		e.see(l)
	case isNotFound(err):
		e.forget()
	}
}

// leading reports whether this replica holds a term now.
func (e *election) leading() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.endTerm != nil
}

// acquire writes this replica as the holder of l (nil: creates the
// Lease), a new term: its transitions count is one more than l's.
func (e *election) acquire(ctx context.Context, l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	b := e.b
	now := metav1.NewMicroTime(b.now())
	name := e.id
	d := int32(b.r.ttl / time.Second)
	if l == nil {
		next := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: b.lease, Namespace: b.ns, Labels: map[string]string{labelGroup: b.lease}},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: &name, LeaseDurationSeconds: &d, AcquireTime: &now, RenewTime: &now, LeaseTransitions: new(int32),
			},
		}
		return b.writeLease(ctx, next, true)
	}
	next := l.DeepCopy()
	transitions := i32(l.Spec.LeaseTransitions) + 1
	next.Spec = coordinationv1.LeaseSpec{
		HolderIdentity: &name, LeaseDurationSeconds: &d, AcquireTime: &now, RenewTime: &now, LeaseTransitions: &transitions,
	}
	return b.writeLease(ctx, next, false)
}

// writeLease creates or updates l (the update conditioned on its
// resourceVersion) and notes the result.
func (b *kubeBackend) writeLease(ctx context.Context, l *coordinationv1.Lease, create bool) (*coordinationv1.Lease, error) {
	tctx, cancel := context.WithTimeout(ctx, b.r.timeout)
	defer cancel()
	var out coordinationv1.Lease
	req := b.coord.Put().Name(l.Name)
	if create {
		req = b.coord.Post()
	}
	if err := req.Namespace(b.ns).Resource("leases").Body(l).Do(tctx).Into(&out); err != nil {
		return nil, fmt.Errorf("write Lease %s/%s: %w", b.ns, b.lease, err)
	}
	b.el.see(&out)
	return &out, nil
}
