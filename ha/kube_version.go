package ha

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
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

// versionName is the ConfigMap of chunk i of version v's encoding c. A
// version's encodings differ (each computation has its own time, status
// and explanations): each is stored under its own name, so a chunk 0
// never meets another encoding's chunks.
func (b *kubeBackend) versionName(v, c string, i int) string {
	return objectName(b.lease, "v", v, c, strconv.Itoa(i))
}

// write stores w's content in immutable ConfigMaps unless they are there
// (addressed by its hash: whoever wrote them, a reader checks them
// against the record), then the record (naming that content) and the
// history in the Lease's annotations, an update fenced by the term.
func (b *kubeBackend) write(ctx context.Context, t *term, rec record, w *weights.Weights) error {
	if _, ok := b.el.leaseOf(t); !ok {
		return fmt.Errorf("%w: this replica's last write of the Lease does not name its term", ErrFenced)
	}
	content, err := b.writeContent(ctx, w)
	if err != nil {
		return err
	}
	rec.Content = content
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
// finds them all. It returns the content's name (the first 16 hex digits
// of its SHA-256).
func (b *kubeBackend) writeContent(ctx context.Context, w *weights.Weights) (string, error) {
	v := w.Version()
	blob, m, err := encodeWeights(w)
	if err != nil {
		return "", err
	}
	c := m.SHA256[:16]
	if _, err := b.getConfigMap(ctx, b.versionName(v, c, 0)); err == nil {
		return c, nil
	} else if !isNotFound(err) {
		return "", err
	}
	mb, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	cs := chunks(blob)
	for i := len(cs) - 1; i >= 0; i-- {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: b.versionName(v, c, i), Namespace: b.ns, Labels: b.labels(objVersion)},
			Immutable:  new(true),
			BinaryData: map[string][]byte{"chunk": cs[i]},
		}
		cm.Labels[labelVersion], cm.Labels[labelContent] = v, c
		if i == 0 {
			cm.Data = map[string]string{metaKey: string(mb)}
		}
		// Already there: the same bytes (its name is their hash), left by
		// a write cut short.
		if _, err := b.createConfigMap(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", err
		}
	}
	return c, nil
}

// fetch reads the ConfigMaps of the content rec names and decodes them.
func (b *kubeBackend) fetch(ctx context.Context, rec record) (*weights.Weights, error) {
	v, c := rec.Version, rec.Content
	if c == "" {
		return nil, fmt.Errorf("version %s: the record names no content", v)
	}
	first, err := b.getConfigMap(ctx, b.versionName(v, c, 0))
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
	if !strings.HasPrefix(m.SHA256, c) {
		return nil, fmt.Errorf("version %s: %w: its meta's SHA-256 is not content %s", v, ErrContentMismatch, c)
	}
	blob := append([]byte(nil), first.BinaryData["chunk"]...)
	for i := 1; i < m.Chunks; i++ {
		cm, err := b.getConfigMap(ctx, b.versionName(v, c, i))
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

// collect deletes the content the history no longer names (listing only
// those ConfigMaps: a label selector leaves out every kept content), and
// the demand shares of replicas gone for long (shareCollectAfter).
func (b *kubeBackend) collect(ctx context.Context, t *term) {
	r := b.r
	l, ok := b.el.leaseOf(t)
	if !ok {
		return
	}
	keep := map[string]bool{}
	recs, _ := decodeHistory(l.Annotations[annotHistory])
	if cur, ok := l.Annotations[annotCurrent]; ok {
		recs = append(recs, []byte(cur))
	}
	for _, raw := range recs {
		if rec, err := decodeRecord(raw); err == nil && rec.Content != "" {
			keep[rec.Content] = true
		}
	}
	notIn := ""
	if len(keep) > 0 {
		notIn = labelContent + " notin (" + strings.Join(slices.Sorted(maps.Keys(keep)), ",") + ")"
	}
	list, err := b.listConfigMaps(ctx, objVersion, notIn)
	if err != nil {
		r.log.DebugContext(ctx, "collect: list the versions", "err", err)
		return
	}
	// Chunk 0 of a content first: a collection cut short never leaves a
	// chunk 0 whose other chunks are gone (writeContent takes chunk 0 as
	// the sign that the whole content is there).
	items := list.Items
	slices.SortStableFunc(items, func(x, y corev1.ConfigMap) int {
		return cmp.Compare(chunkIndex(x.Name), chunkIndex(y.Name))
	})
	for _, cm := range items {
		if keep[cm.Labels[labelContent]] {
			continue
		}
		// Another term's content could be deleted once another replica
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
// maxHistoryStatus there. A record of rec's sequence number already there
// (a write retried after its answer was lost) is replaced.
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
		if old, err := decodeRecord(raw); err == nil && old.Seq == rec.Seq {
			continue
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
		return nil, fmt.Errorf("the Lease's %s annotation of %d bytes: over %d", annotHistory, len(h), 2*maxHistoryAnnot)
	}
	var raws []json.RawMessage
	if err := json.Unmarshal([]byte(h), &raws); err != nil {
		return nil, fmt.Errorf("the Lease's %s annotation: %w", annotHistory, err)
	}
	out := make([][]byte, len(raws))
	for i, r := range raws {
		out[i] = r
	}
	return out, nil
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }
