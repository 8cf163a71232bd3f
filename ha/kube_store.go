package ha

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Store in Kubernetes: namespace ns is the ConfigMap
// L-store-<first 12 hex digits of SHA-256(ns)> (annotated with ns), a
// key one entry of its binaryData. A ConfigMap key allows letters,
// digits, '-', '_' and '.' (not "." or ".."): a store key's '_', '/',
// ':' and '.' are written "__", "_s", "_c" and "_d", and a key whose
// escaped form is over 253 bytes is refused. Writes are read-modify-write
// updates conditioned on the resourceVersion read, retried on conflict; a
// namespace holds at most maxConfigMapData bytes. PutIfLeader writes only
// while this replica's last write of the Lease in its term is recent
// enough that no other replica can have taken it (election.safe): unlike
// etcd's, that check and the write are not one request.

const storeRetries = 5

func (b *kubeBackend) storeName(ns string) string {
	sum := sha256.Sum256([]byte(ns))
	return objectName(b.lease, "store", hex.EncodeToString(sum[:6]))
}

var (
	storeKeyEscaper   = strings.NewReplacer("_", "__", "/", "_s", ":", "_c", ".", "_d")
	storeKeyUnescaper = strings.NewReplacer("__", "_", "_s", "/", "_c", ":", "_d", ".")
)

// storeKey is key as a ConfigMap key.
func storeKey(key string) (string, error) {
	k := storeKeyEscaper.Replace(key)
	if len(k) > 253 {
		return "", fmt.Errorf("key %q is %d bytes escaped for a ConfigMap: want at most 253 (fewer '_', '/', ':' and '.')", key, len(k))
	}
	return k, nil
}

// storeMap reads namespace ns's ConfigMap; nil when there is none.
func (b *kubeBackend) storeMap(ctx context.Context, ns string) (*corev1.ConfigMap, error) {
	cm, err := b.getConfigMap(ctx, b.storeName(ns))
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if got := cm.Annotations[annotStoreNS]; got != ns {
		return nil, fmt.Errorf("ConfigMap %s holds store namespace %q, not %q", cm.Name, got, ns)
	}
	return cm, nil
}

// modify applies change to namespace ns's entries and writes them back,
// retrying when another writer came first.
func (b *kubeBackend) modify(ctx context.Context, t *term, ns string, del bool, change func(map[string][]byte)) error {
	var err error
	for range storeRetries {
		if t != nil && !b.el.safe(t) {
			return fmt.Errorf("%w: this replica's term may have ended (its last write of the Lease is over a third of its duration old)", ErrFenced)
		}
		var cm *corev1.ConfigMap
		if cm, err = b.storeMap(ctx, ns); err != nil {
			return err
		}
		create := cm == nil
		if create && del {
			return nil // nothing to delete
		}
		if create {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
				Name: b.storeName(ns), Namespace: b.ns, Labels: b.labels(objStore),
				Annotations: map[string]string{annotStoreNS: ns},
			}}
		}
		if cm.BinaryData == nil {
			cm.BinaryData = map[string][]byte{}
		}
		change(cm.BinaryData)
		size := 0
		for k, v := range cm.BinaryData {
			size += len(k) + len(v)
		}
		if size > maxConfigMapData {
			return fmt.Errorf("store namespace %s would hold %d bytes: over %d", ns, size, maxConfigMapData)
		}
		if create {
			_, err = b.createConfigMap(ctx, cm)
		} else {
			_, err = b.updateConfigMap(ctx, cm)
		}
		if err == nil || !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return err
}

func (b *kubeBackend) put(ctx context.Context, t *term, ns, key string, value []byte) error {
	k, err := storeKey(key)
	if err != nil {
		return err
	}
	return b.modify(ctx, t, ns, false, func(m map[string][]byte) { m[k] = value })
}

func (b *kubeBackend) get(ctx context.Context, ns, key string) ([]byte, bool, error) {
	k, err := storeKey(key)
	if err != nil {
		return nil, false, err
	}
	cm, err := b.storeMap(ctx, ns)
	if err != nil || cm == nil {
		return nil, false, err
	}
	v, ok := cm.BinaryData[k]
	return v, ok, nil
}

func (b *kubeBackend) list(ctx context.Context, ns string) (map[string][]byte, bool, error) {
	cm, err := b.storeMap(ctx, ns)
	if err != nil || cm == nil {
		return map[string][]byte{}, false, err
	}
	out := make(map[string][]byte, min(len(cm.BinaryData), MaxStoreList))
	for _, k := range slices.Sorted(maps.Keys(cm.BinaryData)) {
		if len(out) == MaxStoreList {
			return out, true, nil
		}
		out[storeKeyUnescaper.Replace(k)] = cm.BinaryData[k]
	}
	return out, false, nil
}

func (b *kubeBackend) del(ctx context.Context, ns, key string) error {
	k, err := storeKey(key)
	if err != nil {
		return err
	}
	return b.modify(ctx, nil, ns, true, func(m map[string][]byte) { delete(m, k) })
}
