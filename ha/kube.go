package ha

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/kube"
)

// kubeBackend keeps an HA group in a Kubernetes API server, in namespace
// ns, with objects named after the Lease L (ha.kubernetes.lease):
//
//	Lease L                   the election; its annotations hold the
//	                          record of the version in force and the
//	                          history, written only by updates of the
//	                          Lease that the API server applies while it
//	                          still names the leader (resourceVersion)
//	ConfigMap L-v-<v>-<c>-<i> chunk i of content c (an encoding, named by
//	                          its hash) of version v; immutable, chunk 0
//	                          also holds its meta
//	ConfigMap L-demand-<r>    replica r's demand share
//	ConfigMap L-store-<h>     a Store namespace (h: a hash of its name)
//
// Every ConfigMap carries the labels ilb.dev/ha-group: L and
// ilb.dev/object: version, demand or store.
type kubeBackend struct {
	r        *Replica
	core     rest.Interface
	coord    rest.Interface
	ns       string
	lease    string
	instance string // this process: tells two replicas of one name apart

	el election

	// mu guards shareRV: the resourceVersion of this replica's demand
	// ConfigMap as last written (or read when it was another process's).
	mu          sync.Mutex
	shareRV     string
	foreign     string // the resourceVersion of another process's share, as last read
	foreignSeen bool
	// seenShares is the share watch's view (for the leader's collection).
	seenShares map[string]shareSeen
}

var _ backend = (*kubeBackend)(nil)

// Labels and annotations ILB puts on its HA objects.
const (
	labelGroup       = "ilb.dev/ha-group"
	labelObject      = "ilb.dev/object"
	labelVersion     = "ilb.dev/version"
	labelContent     = "ilb.dev/content"
	annotCurrent     = "ilb.dev/current"
	annotHistory     = "ilb.dev/history"
	annotInstance    = "ilb.dev/instance"
	annotWritten     = "ilb.dev/written"
	annotStoreNS     = "ilb.dev/store-namespace"
	objVersion       = "version"
	objDemand        = "demand"
	objStore         = "store"
	shareKey         = "share"
	metaKey          = "meta"
	maxHistoryAnnot  = 128 << 10 // bytes of the history annotation
	maxHistoryStatus = 1 << 10   // bytes of a history record's status
	maxConfigMapData = 900 << 10 // bytes a store ConfigMap may hold (the API server takes 1 MiB)
)

// newKube builds the clients of ha.kubernetes' API server (rc, or from
// the configuration); it contacts nothing.
func newKube(r *Replica, rc *rest.Config) (*kubeBackend, error) {
	c := r.o.Config
	k := c.HA.Kubernetes
	if rc == nil {
		api, ok := c.KubeAPIServer(k.APIServer)
		if !ok {
			return nil, fmt.Errorf("ha.kubernetes.api_server: unknown API server %q", k.APIServer)
		}
		var err error
		if rc, err = kube.RESTConfig(api); err != nil {
			return nil, fmt.Errorf("ha.kubernetes: %w", err)
		}
	}
	if !config.KubeReplicaName(r.name) {
		return nil, fmt.Errorf("ha: replica name %q cannot name a Kubernetes object: set ha.replica to the pod's name (lower case letters, digits, '-' and '.')", r.name)
	}
	if rc.QPS == 0 {
		// client-go's default (5/s, bursts of 10) is shared by the HA
		// group's every request: a content of many chunks, collection,
		// demand shares and the store would queue behind each other.
		rc = rest.CopyConfig(rc)
		rc.QPS, rc.Burst = 50, 100
	}
	cs, err := kube.NewClients(rc)
	if err != nil {
		return nil, fmt.Errorf("ha.kubernetes: %w", err)
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	b := &kubeBackend{r: r, core: cs.Core, coord: cs.Coordination, ns: k.Namespace, lease: k.Lease, instance: hex.EncodeToString(id[:])}
	b.el.init(b)
	return b, nil
}

func (b *kubeBackend) kind() string { return "kubernetes" }

func (b *kubeBackend) close() error { return nil }

// run watches the Lease and campaigns on it, and watches the demand
// shares, until ctx is done. On the way out a leader releases the Lease,
// so that another replica takes it at once, and this replica deletes its
// demand share, which stops counting at once (within ha.dial_timeout).
func (b *kubeBackend) run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { b.el.watch(gctx); return nil })
	g.Go(func() error { b.el.campaign(gctx); return nil })
	g.Go(func() error { b.watchShares(gctx); return nil })
	err := g.Wait()
	b.mu.Lock()
	rv := b.shareRV
	b.mu.Unlock()
	if rv != "" {
		if derr := b.deleteConfigMap(context.WithoutCancel(ctx), b.shareName(b.r.name), rv); derr != nil {
			b.r.log.DebugContext(ctx, "demand share not deleted on the way out; it stops counting within the lease duration", "err", derr)
		}
	}
	return err
}

// labels are the labels of an HA ConfigMap of kind obj.
func (b *kubeBackend) labels(obj string) map[string]string {
	return map[string]string{labelGroup: b.lease, labelObject: obj}
}

// selector selects the HA ConfigMaps of kind obj.
func (b *kubeBackend) selector(obj string) string {
	return labelGroup + "=" + b.lease + "," + labelObject + "=" + obj
}

// readCurrent reads the Lease: the record in its annotation, the
// annotation itself as the token, and its holder.
func (b *kubeBackend) readCurrent(ctx context.Context) (current, error) {
	l, err := b.getLease(ctx)
	if err != nil {
		if isNotFound(err) {
			return current{}, nil
		}
		return current{}, err
	}
	// Not handed to the election: a read may answer after a newer watch
	// event, and the election dates what it sees.
	var out current
	out.leader = replicaOf(str(l.Spec.HolderIdentity))
	if v, ok := l.Annotations[annotCurrent]; ok {
		out.rec, out.token = []byte(v), v
	}
	return out, nil
}

// history reads the history annotation of the Lease.
func (b *kubeBackend) history(ctx context.Context, n int) ([][]byte, error) {
	l, err := b.getLease(ctx)
	if err != nil {
		if isNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	recs, err := decodeHistory(l.Annotations[annotHistory])
	if err != nil {
		return nil, err
	}
	return recs[:min(n, len(recs))], nil
}

func (b *kubeBackend) getLease(ctx context.Context) (*coordinationv1.Lease, error) {
	tctx, cancel := context.WithTimeout(ctx, b.r.timeout)
	defer cancel()
	var l coordinationv1.Lease
	err := b.coord.Get().Namespace(b.ns).Resource("leases").Name(b.lease).Do(tctx).Into(&l)
	if err != nil {
		return nil, fmt.Errorf("get Lease %s/%s: %w", b.ns, b.lease, err)
	}
	return &l, nil
}

// configMap requests: one ConfigMap by name.
func (b *kubeBackend) getConfigMap(ctx context.Context, name string) (*corev1.ConfigMap, error) {
	tctx, cancel := context.WithTimeout(ctx, b.r.timeout)
	defer cancel()
	var cm corev1.ConfigMap
	if err := b.core.Get().Namespace(b.ns).Resource("configmaps").Name(name).Do(tctx).Into(&cm); err != nil {
		return nil, fmt.Errorf("get ConfigMap %s/%s: %w", b.ns, name, err)
	}
	return &cm, nil
}

func (b *kubeBackend) createConfigMap(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	tctx, cancel := context.WithTimeout(ctx, b.r.timeout)
	defer cancel()
	var out corev1.ConfigMap
	if err := b.core.Post().Namespace(b.ns).Resource("configmaps").Body(cm).Do(tctx).Into(&out); err != nil {
		return nil, fmt.Errorf("create ConfigMap %s/%s: %w", b.ns, cm.Name, err)
	}
	return &out, nil
}

func (b *kubeBackend) updateConfigMap(ctx context.Context, cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	tctx, cancel := context.WithTimeout(ctx, b.r.timeout)
	defer cancel()
	var out corev1.ConfigMap
	if err := b.core.Put().Namespace(b.ns).Resource("configmaps").Name(cm.Name).Body(cm).Do(tctx).Into(&out); err != nil {
		return nil, fmt.Errorf("update ConfigMap %s/%s: %w", b.ns, cm.Name, err)
	}
	return &out, nil
}

// deleteConfigMap deletes name if its resourceVersion is still rv ("":
// whatever it is); a ConfigMap already gone is no error.
func (b *kubeBackend) deleteConfigMap(ctx context.Context, name, rv string) error {
	tctx, cancel := context.WithTimeout(ctx, b.r.timeout)
	defer cancel()
	opts := &metav1.DeleteOptions{}
	if rv != "" {
		opts.Preconditions = &metav1.Preconditions{ResourceVersion: &rv}
	}
	err := b.core.Delete().Namespace(b.ns).Resource("configmaps").Name(name).Body(opts).Do(tctx).Error()
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("delete ConfigMap %s/%s: %w", b.ns, name, err)
	}
	return nil
}

func (b *kubeBackend) listConfigMaps(ctx context.Context, obj string, extra string) (*corev1.ConfigMapList, error) {
	tctx, cancel := context.WithTimeout(ctx, b.r.timeout)
	defer cancel()
	sel := b.selector(obj)
	if extra != "" {
		sel += "," + extra
	}
	var out corev1.ConfigMapList
	err := b.core.Get().Namespace(b.ns).Resource("configmaps").
		VersionedParams(&metav1.ListOptions{LabelSelector: sel}, metav1.ParameterCodec).Do(tctx).Into(&out)
	if err != nil {
		return nil, fmt.Errorf("list ConfigMaps %s in %s: %w", sel, b.ns, err)
	}
	return &out, nil
}

// objectName joins parts into an object name.
func objectName(parts ...string) string { return strings.Join(parts, "-") }

// now is the replica's clock.
func (b *kubeBackend) now() time.Time { return b.r.now() }
