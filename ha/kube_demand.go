package ha

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ilbproject/ilb/internal/bound"
)

// A demand share in Kubernetes is the ConfigMap L-demand-<replica>,
// rewritten by its replica every controller tick. The API server keeps no
// lease on it, so liveness is read from change: a share counts from a
// change this replica saw happen (a watch event), dated by its arrival
// less its age, and stops counting shareLife after that arrival unless it
// changes again; shares listed at start, whose
// age is unknown, count from their next change. The leader deletes the
// ConfigMap of a replica whose share has not changed for
// shareCollectAfter.

// shareCollectAfter is how long a share must stay unchanged, as the
// leader sees it, before the leader deletes its ConfigMap; at least
// minShareCollectAfter.
func (b *kubeBackend) shareCollectAfter() time.Duration {
	return max(10*b.r.o.Config.Controller.StaleAfter.Std(), minShareCollectAfter)
}

const minShareCollectAfter = 5 * time.Minute

// shareLife is how long a share counts after it arrived unless it
// arrives again: the lease duration, or three controller ticks if longer
// (a replica rewrites its share every tick). A replica that died stops
// counting that long after its last write, as its etcd lease would
// expire.
func (b *kubeBackend) shareLife() time.Duration {
	return max(b.r.ttl, 3*b.r.o.Config.Controller.Tick.Std())
}

// shareSeen is what the share watch knows of one ConfigMap.
type shareSeen struct {
	rv      string
	changed time.Time // when its last change was seen
}

func (b *kubeBackend) shareName(replica string) string { return objectName(b.lease, "demand", replica) }

// replicaOf is the replica of a share ConfigMap's name.
func (b *kubeBackend) replicaOf(name string) (string, bool) {
	return strings.CutPrefix(name, b.lease+"-demand-")
}

// watchShares keeps every replica's share through a Reflector over the
// demand ConfigMaps, until ctx is done.
func (b *kubeBackend) watchShares(ctx context.Context) {
	lw := cache.NewFilteredListWatchFromClient(b.core, "configmaps", b.ns, func(o *metav1.ListOptions) {
		o.LabelSelector = b.selector(objDemand)
	})
	seen := map[string]shareSeen{}
	take := func(obj any, known bool) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			return
		}
		replica, ok := b.replicaOf(cm.Name)
		if !ok {
			return
		}
		now := b.now()
		b.mu.Lock()
		prev, had := seen[cm.Name]
		if had && prev.rv == cm.ResourceVersion {
			b.mu.Unlock()
			return
		}
		seen[cm.Name] = shareSeen{rv: cm.ResourceVersion, changed: now}
		b.seenShares = seen
		b.mu.Unlock()
		arrived := now
		if !had && !known {
			arrived = time.Time{} // listed, of unknown age: counts from its next change
		}
		b.r.takeShare(ctx, replica, cm.BinaryData[shareKey], arrived, b.shareLife())
	}
	drop := func(name string) {
		b.mu.Lock()
		delete(seen, name)
		b.mu.Unlock()
		if replica, ok := b.replicaOf(name); ok {
			b.r.dropShare(replica)
		}
	}
	st := &funcStore{
		set: func(obj any) { take(obj, true) },
		del: func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				_, name, _ := cache.SplitMetaNamespaceKey(key)
				drop(name)
			}
		},
		replace: func(list []any) {
			listed := map[string]bool{}
			for _, obj := range list {
				if cm, ok := obj.(*corev1.ConfigMap); ok {
					listed[cm.Name] = true
				}
				take(obj, false)
			}
			b.mu.Lock()
			var gone []string
			for name := range seen {
				if !listed[name] {
					gone = append(gone, name)
				}
			}
			b.mu.Unlock()
			for _, name := range gone {
				drop(name)
			}
		},
	}
	runReflector(ctx, lw, &corev1.ConfigMap{}, st)
}

// writeShare writes this replica's share ConfigMap, based on its own last
// write. A ConfigMap of this name written by another process (its
// instance annotation) is a conflict while that process keeps writing
// it; one left unchanged for a tick is taken over.
func (b *kubeBackend) writeShare(ctx context.Context, v []byte) error {
	name := b.shareName(b.r.name)
	b.mu.Lock()
	rv := b.shareRV
	b.mu.Unlock()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: b.ns, Labels: b.labels(objDemand), ResourceVersion: rv,
			// The write's time, by the writer's clock: every write changes
			// the object (the API server drops an update that changes
			// nothing), so a live replica's share is seen to change.
			Annotations: map[string]string{annotInstance: b.instance, annotWritten: b.now().UTC().Format(time.RFC3339Nano)},
		},
		BinaryData: map[string][]byte{shareKey: v},
	}
	var out *corev1.ConfigMap
	var err error
	if rv == "" {
		out, err = b.createConfigMap(ctx, cm)
	} else {
		out, err = b.updateConfigMap(ctx, cm)
	}
	if err == nil {
		b.setShareRV(out.ResourceVersion)
		return nil
	}
	if !apierrors.IsAlreadyExists(err) && !apierrors.IsConflict(err) && !isNotFound(err) {
		return err
	}
	// Someone else wrote it, or it is gone: read it and decide.
	cur, gerr := b.getConfigMap(ctx, name)
	switch {
	case isNotFound(gerr):
		b.setShareRV("") // create it on the next tick
		return err
	case gerr != nil:
		return gerr
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case cur.Annotations[annotInstance] == b.instance:
		// Ours (an answer lost): write over it on the next tick.
	case b.foreign == "" || b.foreign != cur.ResourceVersion && b.foreignSeen:
		// Another process's: first seen (a predecessor of this name that
		// died, or a live twin), or seen changing since: wait a tick.
		conflict := b.foreign != "" && b.foreignSeen
		b.foreign, b.foreignSeen = cur.ResourceVersion, true
		if conflict {
			return &conflictError{holder: "process " + bound.String(cur.Annotations[annotInstance], bound.Name)}
		}
		return fmt.Errorf("demand share %s was written by process %s: taking it over if it stays unchanged for a tick", name, bound.String(cur.Annotations[annotInstance], bound.Name))
	}
	// Ours, or another's left unchanged for a tick: the next tick writes
	// over it.
	b.shareRV, b.foreign, b.foreignSeen = cur.ResourceVersion, "", false
	return nil
}

func (b *kubeBackend) setShareRV(rv string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.shareRV = rv
}

// collectShares deletes the share ConfigMaps that have not changed for
// shareCollectAfter (leader only, after a publication), each only if it
// is still the version seen.
func (b *kubeBackend) collectShares(ctx context.Context) {
	now := b.now()
	b.mu.Lock()
	type victim struct{ name, rv string }
	var old []victim
	for name, s := range b.seenShares {
		if now.Sub(s.changed) > b.shareCollectAfter() && name != b.shareName(b.r.name) {
			old = append(old, victim{name, s.rv})
		}
	}
	b.mu.Unlock()
	for _, v := range old {
		if err := b.deleteConfigMap(ctx, v.name, v.rv); err != nil {
			b.r.log.DebugContext(ctx, "collect: delete a replica's share", "configmap", v.name, "err", err)
		}
	}
}
