package ha

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ilbproject/ilb/internal/bound"
	"github.com/ilbproject/ilb/weights"
)

// versionName is the ConfigMap of chunk i of version v.
func (b *kubeBackend) versionName(v string, i int) string {
	return objectName(b.lease, "v", v, strconv.Itoa(i))
}

// write stores w's content in immutable ConfigMaps unless they are there
// (content addressed: whoever wrote them, a reader checks them against
// v), then the record and the history in the Lease's annotations, an
// update fenced by the term.
func (b *kubeBackend) write(ctx context.Context, t *term, rec record, w *weights.Weights) error {
	if _, ok := b.el.leaseOf(t); !ok {
		return ErrFenced
	}
	if err := b.writeContent(ctx, w); err != nil {
		return err
	}
	rb, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return b.el.update(ctx, t, func(l *coordinationv1.Lease) {
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[annotCurrent] = string(rb)
		l.Annotations[annotHistory] = pushHistory(l.Annotations[annotHistory], rec, b.r.o.HistorySize)
	})
}

// writeContent creates the ConfigMaps of w's content, the last chunk
// first and chunk 0 (with the meta) last: a reader that finds chunk 0
// finds them all.
func (b *kubeBackend) writeContent(ctx context.Context, w *weights.Weights) error {
	v := w.Version()
	if _, err := b.getConfigMap(ctx, b.versionName(v, 0)); err == nil {
		return nil
	} else if !isNotFound(err) {
		return err
	}
	blob, m, err := encodeWeights(w)
	if err != nil {
		return err
	}
	mb, err := json.Marshal(m)
	if err != nil {
		return err
	}
	cs := chunks(blob)
	for i := len(cs) - 1; i >= 0; i-- {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: b.versionName(v, i), Namespace: b.ns, Labels: b.labels(objVersion)},
			Immutable:  new(true),
			BinaryData: map[string][]byte{"chunk": cs[i]},
		}
		cm.Labels[labelVersion] = v
		if i == 0 {
			cm.Data = map[string]string{metaKey: string(mb)}
		}
		if _, err := b.createConfigMap(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// fetch reads version v's ConfigMaps and decodes them.
func (b *kubeBackend) fetch(ctx context.Context, v string) (*weights.Weights, error) {
	first, err := b.getConfigMap(ctx, b.versionName(v, 0))
	if isNotFound(err) {
		return nil, fmt.Errorf("version %s: no content in the API server (collected, or never written)", v)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: version %s: %w", errRetry, v, err)
	}
	m, err := decodeMeta([]byte(first.Data[metaKey]))
	if err != nil {
		return nil, fmt.Errorf("version %s: %w", v, err)
	}
	blob := append([]byte(nil), first.BinaryData["chunk"]...)
	for i := 1; i < m.Chunks; i++ {
		cm, err := b.getConfigMap(ctx, b.versionName(v, i))
		if isNotFound(err) {
			return nil, fmt.Errorf("version %s: chunk %d of %d missing", v, i, m.Chunks)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: version %s: %w", errRetry, v, err)
		}
		if len(blob)+len(cm.BinaryData["chunk"]) > maxBlobBytes {
			return nil, fmt.Errorf("version %s: content over %d bytes", v, maxBlobBytes)
		}
		blob = append(blob, cm.BinaryData["chunk"]...)
	}
	return decodeWeights(v, m, blob)
}

// collect deletes the content of versions the history no longer names,
// and the demand shares of replicas gone for long (shareCollectAfter).
func (b *kubeBackend) collect(ctx context.Context, t *term) {
	r := b.r
	l, ok := b.el.leaseOf(t)
	if !ok {
		return
	}
	keep := map[string]bool{t.published: true}
	recs, _ := decodeHistory(l.Annotations[annotHistory])
	for _, raw := range recs {
		if rec, err := decodeRecord(raw); err == nil {
			keep[rec.Version] = true
		}
	}
	list, err := b.listConfigMaps(ctx, objVersion, "")
	if err != nil {
		r.log.DebugContext(ctx, "collect: list the versions", "err", err)
		return
	}
	// Chunk 0 of a version first: a collection cut short never leaves a
	// chunk 0 whose other chunks are gone (writeContent takes chunk 0 as
	// the sign that the whole content is there).
	items := list.Items
	slices.SortStableFunc(items, func(x, y corev1.ConfigMap) int {
		return cmp.Compare(chunkIndex(x.Name), chunkIndex(y.Name))
	})
	for _, cm := range items {
		if v := cm.Labels[labelVersion]; keep[v] {
			continue
		}
		// Another term's version could be deleted once another replica
		// may lead: stop while this term surely holds no more.
		if !b.el.safe(t) {
			return
		}
		if err := b.deleteConfigMap(ctx, cm.Name, cm.ResourceVersion); err != nil {
			r.log.DebugContext(ctx, "collect: delete", "err", err)
		}
	}
	if b.el.safe(t) {
		b.collectShares(ctx)
	}
}

// chunkIndex is the chunk number a version ConfigMap's name ends with.
func chunkIndex(name string) int {
	n, _ := strconv.Atoi(name[strings.LastIndexByte(name, '-')+1:])
	return n
}

// pushHistory puts rec first in the history annotation h, keeping at most
// n records and maxHistoryAnnot bytes; a record's status is cut to
// maxHistoryStatus there.
func pushHistory(h string, rec record, n int) string {
	recs, _ := decodeHistory(h) // an unreadable history starts again
	rec.Status = bound.String(rec.Status, maxHistoryStatus)
	first, _ := json.Marshal(rec)
	out := []json.RawMessage{first}
	size := len(first)
	for _, raw := range recs {
		if len(out) >= n || size+len(raw)+1 > maxHistoryAnnot {
			break
		}
		out = append(out, raw)
		size += len(raw) + 1
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// decodeHistory reads the history annotation: records, newest first.
func decodeHistory(h string) ([][]byte, error) {
	if h == "" {
		return nil, nil
	}
	if len(h) > 2*maxHistoryAnnot {
		return nil, fmt.Errorf("history annotation of %d bytes: over %d", len(h), 2*maxHistoryAnnot)
	}
	var raws []json.RawMessage
	if err := json.Unmarshal([]byte(h), &raws); err != nil {
		return nil, fmt.Errorf("history annotation: %w", err)
	}
	out := make([][]byte, len(raws))
	for i, r := range raws {
		out[i] = r
	}
	return out, nil
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
