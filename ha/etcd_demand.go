package ha

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// runDemandWatch keeps the shares of every replica: a read of all, then a
// watch of their changes; a share deleted (its lease expired or revoked)
// stops counting.
func (b *etcdBackend) runDemandWatch(ctx context.Context) error {
	r := b.r
	for ctx.Err() == nil {
		tctx, cancel := context.WithTimeout(ctx, r.timeout)
		resp, err := b.cli.Get(tctx, b.keys.demand(), clientv3.WithPrefix())
		cancel()
		if err == nil {
			r.resetShares()
			for _, kv := range resp.Kvs {
				b.take(ctx, kv)
			}
			for wr := range b.cli.Watch(clientv3.WithRequireLeader(ctx), b.keys.demand(), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.GetRevision()+1)) {
				if wr.Err() != nil {
					break
				}
				for _, ev := range wr.Events {
					if ev.Type == mvccpb.DELETE {
						r.dropShare(b.shareName(ev.Kv))
						continue
					}
					b.take(ctx, ev.Kv)
				}
			}
		}
		if !wait(ctx, r.o.Probe) {
			return nil
		}
	}
	return nil
}

func (b *etcdBackend) shareName(kv *mvccpb.KeyValue) string {
	return string(kv.Key)[len(b.keys.demand()):]
}

// take keeps the share in kv, dated by its arrival less its age.
func (b *etcdBackend) take(ctx context.Context, kv *mvccpb.KeyValue) {
	b.r.takeShare(ctx, b.shareName(kv), kv.Value, b.r.now(), 0)
}

// errNoSession: this replica has no session to attach its share to; the
// interval's demand is not shared.
var errNoSession = errors.New("no etcd session")

// writeShare puts the share on the session's lease, unless another lease
// holds the key (another live process with the same name).
func (b *etcdBackend) writeShare(ctx context.Context, v []byte) error {
	s := b.session.Load()
	if s == nil {
		return errNoSession
	}
	lease := s.Lease()
	key := b.keys.demandOf(b.r.name)
	put := clientv3.OpPut(key, string(v), clientv3.WithLease(lease))
	tctx, cancel := context.WithTimeout(ctx, b.r.timeout)
	defer cancel()
	resp, err := b.cli.Txn(tctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(put).Else(
		clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.LeaseValue(key), "=", lease)}, []clientv3.Op{put}, []clientv3.Op{clientv3.OpGet(key)}),
	).Commit()
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	if resp.Succeeded {
		return nil
	}
	inner := resp.Responses[0].GetResponseTxn()
	if inner.GetSucceeded() {
		return nil
	}
	if kvs := inner.GetResponses()[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		return &conflictError{holder: fmt.Sprintf("lease %x", kvs[0].Lease)}
	}
	return errors.New("demand key changed during the write")
}
