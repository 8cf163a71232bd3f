package ha

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"golang.org/x/sync/errgroup"

	"github.com/ilbproject/ilb/weights"
)

// etcdBackend keeps an HA group in etcd (the keys of the package doc).
type etcdBackend struct {
	r       *Replica
	cli     *clientv3.Client
	ownCli  bool
	keys    keys
	session atomic.Pointer[concurrency.Session] // nil while there is none
}

var _ backend = (*etcdBackend)(nil)

// newEtcd uses cli, or dials the ha: section's endpoints when cli is nil
// (and closes that client in close).
func newEtcd(r *Replica, cli *clientv3.Client) (*etcdBackend, error) {
	b := &etcdBackend{r: r, cli: cli, keys: keys{prefix: r.o.Config.HA.KeyPrefix}}
	if b.cli == nil {
		c, err := Dial(r.o.Config.HA)
		if err != nil {
			return nil, err
		}
		b.cli, b.ownCli = c, true
	}
	return b, nil
}

func (b *etcdBackend) kind() string { return "etcd" }

func (b *etcdBackend) close() error {
	if b.ownCli {
		return b.cli.Close()
	}
	return nil
}

// run keeps a session and campaigns, watches the current key and every
// replica's demand share until ctx is done. On the way out it revokes
// its lease (within ha.dial_timeout): another replica leads at once, and
// this one's demand share is gone.
func (b *etcdBackend) run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return b.runSessions(gctx) })
	g.Go(func() error { b.watchCurrent(gctx); return nil })
	g.Go(func() error { return b.runDemandWatch(gctx) })
	return g.Wait()
}

// watchCurrent wakes the sync loop on every change of the current key
// (and when the watch breaks: the loop's read then says why).
func (b *etcdBackend) watchCurrent(ctx context.Context) {
	for ctx.Err() == nil {
		for resp := range b.cli.Watch(clientv3.WithRequireLeader(ctx), b.keys.current()) {
			b.r.wakeSync()
			if resp.Err() != nil {
				break
			}
		}
		if !wait(ctx, b.r.o.Probe) {
			return
		}
	}
}

// readCurrent reads the record of the version in force and the leader's
// name: two linearizable reads (a quorum answers) rather than one
// transaction, as the client retries a read on another member when the
// one it uses fails, never a transaction.
func (b *etcdBackend) readCurrent(ctx context.Context) (current, error) {
	tctx, cancel := context.WithTimeout(ctx, b.r.timeout)
	defer cancel()
	cur, err := b.cli.Get(tctx, b.keys.current())
	if err != nil {
		return current{}, err
	}
	lead, err := b.cli.Get(tctx, b.keys.election()+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return current{}, err
	}
	var out current
	if len(lead.Kvs) > 0 {
		out.leader = string(lead.Kvs[0].Value)
	}
	if len(cur.Kvs) > 0 {
		out.rec, out.token = cur.Kvs[0].Value, fmt.Sprint(cur.Kvs[0].ModRevision)
	}
	return out, nil
}

// fetch reads and decodes the content of rec's version in one read.
func (b *etcdBackend) fetch(ctx context.Context, rec record) (*weights.Weights, error) {
	v := rec.Version
	tctx, cancel := context.WithTimeout(ctx, b.r.timeout)
	defer cancel()
	resp, err := b.cli.Get(tctx, b.keys.version(v), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("%w: version %s: %w", errRetry, v, err)
	}
	var m meta
	var blob []byte
	found := false
	for _, kv := range resp.Kvs {
		switch k := string(kv.Key); {
		case k == b.keys.meta(v):
			if m, err = decodeMeta(kv.Value); err != nil {
				return nil, fmt.Errorf("version %s: %w", v, err)
			}
			found = true
		case strings.HasPrefix(k, b.keys.version(v)+"c/"):
			if len(blob)+len(kv.Value) > maxBlobBytes {
				return nil, fmt.Errorf("version %s: content over %d bytes", v, maxBlobBytes)
			}
			blob = append(blob, kv.Value...)
		}
	}
	if !found {
		return nil, fmt.Errorf("version %s: no content in etcd (collected, or never written)", v)
	}
	return decodeWeights(v, m, blob)
}

// history reads the newest n history records.
func (b *etcdBackend) history(ctx context.Context, n int) ([][]byte, error) {
	tctx, cancel := context.WithTimeout(ctx, b.r.timeout)
	defer cancel()
	resp, err := b.cli.Get(tctx, b.keys.history(), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(int64(n)))
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		out[i] = kv.Value
	}
	return out, nil
}

// write stores w's content under its version unless it is there, then,
// in one transaction, the record of the version in force and its history
// entry. Every transaction compares the term's election key.
func (b *etcdBackend) write(ctx context.Context, t *term, rec record, w *weights.Weights) error {
	v := w.Version()
	rb, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	ops := []clientv3.Op{clientv3.OpPut(b.keys.current(), string(rb)), clientv3.OpPut(b.keys.historyAt(rec.Seq), string(rb))}
	cmps := []clientv3.Cmp{t.guard()}
	exists, err := b.exists(ctx, b.keys.meta(v))
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
		absent := clientv3.Compare(clientv3.CreateRevision(b.keys.meta(v)), "=", 0)
		cs := chunks(blob)
		per := maxTxnBytes / chunkBytes
		for len(cs) > per { // all but the last transaction's chunks
			var puts []clientv3.Op
			for i := range per {
				puts = append(puts, clientv3.OpPut(b.keys.chunk(v, m.Chunks-len(cs)+i), string(cs[i])))
			}
			if err := b.txn(ctx, []clientv3.Cmp{t.guard(), absent}, puts); err != nil {
				return err
			}
			cs = cs[per:]
		}
		for i, c := range cs {
			ops = append(ops, clientv3.OpPut(b.keys.chunk(v, m.Chunks-len(cs)+i), string(c)))
		}
		mb, err := json.Marshal(m)
		if err != nil {
			return err
		}
		ops = append(ops, clientv3.OpPut(b.keys.meta(v), string(mb)))
		cmps = append(cmps, absent)
	}
	return b.txn(ctx, cmps, ops)
}

// txn commits ops if cmps hold (within ha.dial_timeout); a failed
// comparison is ErrFenced: only the leader writes these keys, so only a
// lost term fails them.
func (b *etcdBackend) txn(ctx context.Context, cmps []clientv3.Cmp, ops []clientv3.Op) error {
	tctx, cancel := context.WithTimeout(ctx, b.r.timeout)
	defer cancel()
	resp, err := b.cli.Txn(tctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	if !resp.Succeeded {
		return ErrFenced
	}
	return nil
}

func (b *etcdBackend) exists(ctx context.Context, key string) (bool, error) {
	tctx, cancel := context.WithTimeout(ctx, b.r.timeout)
	defer cancel()
	resp, err := b.cli.Get(tctx, key, clientv3.WithCountOnly())
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
func (b *etcdBackend) collect(ctx context.Context, t *term) {
	r := b.r
	tctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	hist, err := b.cli.Get(tctx, b.keys.history(), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend))
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
	vs, err := b.cli.Get(tctx, b.keys.versions(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		r.log.DebugContext(ctx, "collect: list the versions", "err", err)
		return
	}
	dead := map[string]bool{}
	for _, kv := range vs.Kvs {
		if v, ok := b.keys.versionOfKey(string(kv.Key)); ok && !keep[v] && !dead[v] && len(ops) < maxCollectOps {
			dead[v] = true
			ops = append(ops, clientv3.OpDelete(b.keys.version(v), clientv3.WithPrefix()))
		}
	}
	if len(ops) == 0 {
		return
	}
	if _, err := b.cli.Txn(tctx).If(t.guard()).Then(ops...).Commit(); err != nil {
		r.log.DebugContext(ctx, "collect: delete", "err", err)
	}
}
