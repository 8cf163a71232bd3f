package ha

import (
	"context"

	"github.com/ilbproject/ilb/weights"
)

// StaleTerm returns a function that writes a publication in the term r
// leads now, even once that term has ended, skipping every check but
// etcd's: what a deposed leader that has not noticed yet sends. nil when
// r does not lead.
func (r *Replica) StaleTerm() func(ctx context.Context, w *weights.Weights) error {
	t := r.term.Load()
	if t == nil {
		return nil
	}
	return func(ctx context.Context, w *weights.Weights) error {
		t.mu.Lock()
		defer t.mu.Unlock()
		return r.write(ctx, t, w)
	}
}

// HolderIdentity is how r names itself as a leader: with Kubernetes the
// Lease's holderIdentity (its name and process instance), with etcd its
// name.
func (r *Replica) HolderIdentity() string {
	if k, ok := r.b.(*kubeBackend); ok {
		return k.el.id
	}
	return r.name
}
