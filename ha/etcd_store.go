package ha

import (
	"context"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The Store in etcd: key P state/<ns>/<key>.

func (b *etcdBackend) put(ctx context.Context, t *term, ns, key string, value []byte) error {
	k := b.keys.state(ns) + key
	if t != nil {
		return b.txn(ctx, []clientv3.Cmp{t.guard()}, []clientv3.Op{clientv3.OpPut(k, string(value))})
	}
	tctx, cancel := context.WithTimeout(ctx, b.r.timeout)
	defer cancel()
	_, err := b.cli.Put(tctx, k, string(value))
	return err
}

func (b *etcdBackend) get(ctx context.Context, ns, key string) ([]byte, bool, error) {
	tctx, cancel := context.WithTimeout(ctx, b.r.timeout)
	defer cancel()
	resp, err := b.cli.Get(tctx, b.keys.state(ns)+key)
	if err != nil {
		return nil, false, err
	}
	if len(resp.Kvs) == 0 {
		return nil, false, nil
	}
	return resp.Kvs[0].Value, true, nil
}

func (b *etcdBackend) list(ctx context.Context, ns string) (map[string][]byte, bool, error) {
	prefix := b.keys.state(ns)
	tctx, cancel := context.WithTimeout(ctx, b.r.timeout)
	defer cancel()
	resp, err := b.cli.Get(tctx, prefix, clientv3.WithPrefix(), clientv3.WithLimit(MaxStoreList))
	if err != nil {
		return nil, false, err
	}
	out := make(map[string][]byte, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[strings.TrimPrefix(string(kv.Key), prefix)] = kv.Value
	}
	return out, resp.More, nil
}

func (b *etcdBackend) del(ctx context.Context, ns, key string) error {
	tctx, cancel := context.WithTimeout(ctx, b.r.timeout)
	defer cancel()
	_, err := b.cli.Delete(tctx, b.keys.state(ns)+key)
	return err
}
