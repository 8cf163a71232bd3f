package ha

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ilbproject/ilb/internal/bound"
	"github.com/ilbproject/ilb/weights"
)

// Publisher is the leader's controller sink: it publishes each new
// version to etcd. Prepare fails on a replica that does not lead, and
// etcd refuses a publication of a term that has ended (ErrFenced): the
// controller then keeps its last version, fail-static ("rejected").
type Publisher struct{ r *Replica }

var _ weights.Sink = (*Publisher)(nil)

// Publisher returns the sink the leader's controller publishes through.
func (r *Replica) Publisher() *Publisher { return &Publisher{r: r} }

// Prepare publishes w (its content once under its version, then the
// record of the version in force and of the history, in transactions
// guarded by the leadership); its commit does nothing more. The local
// sinks install w through etcd, like every replica's.
func (p *Publisher) Prepare(ctx context.Context, w *weights.Weights) (func(), error) {
	t := p.r.term.Load()
	if t == nil {
		return nil, fmt.Errorf("ha: publish %s: %w", w.Version(), ErrNotLeader)
	}
	if err := p.r.publish(ctx, t, w); err != nil {
		return nil, err
	}
	return func() {}, nil
}

// Refresh takes the weights of a tick whose version did not change: the
// local sinks get the fresh demand and explanations, and a version etcd
// does not hold (the controller kept it from an earlier term) is
// published again.
func (p *Publisher) Refresh(w *weights.Weights) {
	t := p.r.term.Load()
	if t == nil {
		return
	}
	t.mu.Lock()
	stale := t.published != w.Version()
	t.mu.Unlock()
	if !stale {
		p.r.refresh(w)
		return
	}
	select { // latest wins
	case <-p.r.republish:
	default:
	}
	p.r.republish <- w
}

// publish writes w as the term's next publication.
func (r *Replica) publish(ctx context.Context, t *term, w *weights.Weights) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ctx.Err() != nil {
		r.m.publishes.WithLabelValues("fenced").Inc()
		return fmt.Errorf("ha: publish %s: %w", w.Version(), ErrNotLeader)
	}
	if t.published == w.Version() {
		// The version in force (a new term's first tick computes it
		// again): nothing to write, fresh weights for the local sinks.
		r.refresh(w)
		return nil
	}
	// A write in flight on a member that fails is not replayed by the
	// client: write again (whole: a lost answer to a committed write
	// finds the content there and rewrites the same records).
	err := r.write(ctx, t, w)
	for try := 1; try < 3 && err != nil && !errors.Is(err, ErrFenced) && wait(ctx, 100*time.Millisecond); try++ {
		err = r.write(ctx, t, w)
	}
	switch {
	case err == nil:
		r.m.publishes.WithLabelValues("published").Inc()
		r.log.InfoContext(ctx, "weights published to etcd", "version", w.Version(), "seq", t.nextSeq-1, "previous", t.published)
		t.published = w.Version()
		r.published.Store(w)
		r.wakeSync()
		r.collect(ctx, t)
		return nil
	case errors.Is(err, ErrFenced):
		r.m.publishes.WithLabelValues("fenced").Inc()
		r.log.WarnContext(ctx, "publication refused by etcd: this replica no longer leads", "version", w.Version())
	default:
		r.m.publishes.WithLabelValues("failed").Inc()
		r.log.WarnContext(ctx, "publication failed", "version", w.Version(), "err", err)
	}
	return fmt.Errorf("ha: publish %s: %w", w.Version(), err)
}

// write stores w's content under its version unless it is there, then,
// in one transaction, the record of the version in force and its history
// entry. Every transaction compares the term's election key.
func (r *Replica) write(ctx context.Context, t *term, w *weights.Weights) error {
	v := w.Version()
	rec := record{
		Version: v, Seq: t.nextSeq, Published: r.now(), Leader: r.name, Config: r.cfgHash,
		Policy: w.Policy(), Computed: w.Computed(), Status: bound.String(w.Status(), maxStatusBytes),
	}
	rb, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	ops := []clientv3.Op{clientv3.OpPut(r.keys.current(), string(rb)), clientv3.OpPut(r.keys.historyAt(rec.Seq), string(rb))}
	cmps := []clientv3.Cmp{t.guard()}
	exists, err := r.exists(ctx, r.keys.meta(v))
	if err != nil {
		return err
	}
	if !exists {
		// The content, written once: every transaction that writes it
		// also checks it is not there yet.
		blob, m, err := encodeWeights(w)
		if err != nil {
			return err
		}
		absent := clientv3.Compare(clientv3.CreateRevision(r.keys.meta(v)), "=", 0)
		cs := chunks(blob)
		per := maxTxnBytes / chunkBytes
		for len(cs) > per { // all but the last transaction's chunks
			var puts []clientv3.Op
			for i := range per {
				puts = append(puts, clientv3.OpPut(r.keys.chunk(v, m.Chunks-len(cs)+i), string(cs[i])))
			}
			if err := r.txn(ctx, []clientv3.Cmp{t.guard(), absent}, puts); err != nil {
				return err
			}
			cs = cs[per:]
		}
		for i, c := range cs {
			ops = append(ops, clientv3.OpPut(r.keys.chunk(v, m.Chunks-len(cs)+i), string(c)))
		}
		mb, err := json.Marshal(m)
		if err != nil {
			return err
		}
		ops = append(ops, clientv3.OpPut(r.keys.meta(v), string(mb)))
		cmps = append(cmps, absent)
	}
	if err := r.txn(ctx, cmps, ops); err != nil {
		return err
	}
	t.nextSeq++
	return nil
}

// txn commits ops if cmps hold (within ha.dial_timeout); a failed
// comparison is ErrFenced: only the leader writes these keys, so only a
// lost term fails them.
func (r *Replica) txn(ctx context.Context, cmps []clientv3.Cmp, ops []clientv3.Op) error {
	tctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.cli.Txn(tctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	if !resp.Succeeded {
		return ErrFenced
	}
	return nil
}

func (r *Replica) exists(ctx context.Context, key string) (bool, error) {
	tctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.cli.Get(tctx, key, clientv3.WithCountOnly())
	if err != nil {
		return false, fmt.Errorf("etcd: %w", err)
	}
	return resp.Count > 0, nil
}

// maxCollectOps bounds one collection's transaction (etcd's
// --max-txn-ops is 128 by default).
const maxCollectOps = 100

// collect deletes the history entries past the history size and the
// content of versions no kept entry names (best effort: the next
// collection finishes what this one leaves).
func (r *Replica) collect(ctx context.Context, t *term) {
	tctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	hist, err := r.cli.Get(tctx, r.keys.history(), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
	if err != nil {
		r.log.DebugContext(ctx, "collect: read the history", "err", err)
		return
	}
	keep := map[string]bool{t.published: true}
	var ops []clientv3.Op
	for i, kv := range hist.Kvs {
		if i >= r.o.HistorySize {
			if len(ops) < maxCollectOps/2 {
				ops = append(ops, clientv3.OpDelete(string(kv.Key)))
			}
			continue
		}
		if rec, err := decodeRecord(kv.Value); err == nil {
			keep[rec.Version] = true
		}
	}
	vs, err := r.cli.Get(tctx, r.keys.versions(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		r.log.DebugContext(ctx, "collect: list the versions", "err", err)
		return
	}
	dead := map[string]bool{}
	for _, kv := range vs.Kvs {
		if v, ok := r.keys.versionOfKey(string(kv.Key)); ok && !keep[v] && !dead[v] && len(ops) < maxCollectOps {
			dead[v] = true
			ops = append(ops, clientv3.OpDelete(r.keys.version(v), clientv3.WithPrefix()))
		}
	}
	if len(ops) == 0 {
		return
	}
	if _, err := r.cli.Txn(tctx).If(t.guard()).Then(ops...).Commit(); err != nil {
		r.log.DebugContext(ctx, "collect: delete", "err", err)
	}
}
