package ha

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ilbproject/ilb/weights"
)

// Share is one replica's measured demand as it stores it in etcd, under
// P demand/<replica> on its lease, every controller tick: the rates of
// its last interval (its ext_proc meter and the LRS reports of the Envoys
// connected to it). JSON, gzip'd.
type Share struct {
	Replica string `json:"replica"`
	// AgeMs is how old the demand was when written, in milliseconds (the
	// replica's own clock: the reader dates it by its arrival less this,
	// so clocks need not agree).
	AgeMs int64 `json:"age_ms"`
	// Streams are the streams with demand, in weights.Demand.Keys order.
	Streams []Stream `json:"streams"`
}

// Stream is the demand of one (source, model, priority).
type Stream struct {
	Source   string           `json:"s"`
	Model    string           `json:"m"`
	Priority weights.Priority `json:"p"`
	RPS      float64          `json:"rps"`
	Cost     float64          `json:"cost"` // token-cost units per second
}

// maxShareBytes bounds a share, compressed (etcd takes 1.5 MiB per
// request by default) and decompressed.
const (
	maxShareBytes    = 1 << 20
	maxShareDocBytes = 64 << 20
)

// NewShare is d as a Share of replica, age old.
func NewShare(replica string, d weights.Demand, age time.Duration) Share {
	s := Share{Replica: replica, AgeMs: max(age.Milliseconds(), 0), Streams: make([]Stream, 0, len(d))}
	for _, k := range d.Keys() {
		r := d[k]
		if r.RequestsPerSecond == 0 && r.CostPerSecond == 0 {
			continue
		}
		s.Streams = append(s.Streams, Stream{Source: k.Source, Model: k.Model, Priority: k.Priority, RPS: r.RequestsPerSecond, Cost: r.CostPerSecond})
	}
	return s
}

// Encode writes the share as it is stored.
func (s Share) Encode() ([]byte, error) {
	doc, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write(doc); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if b.Len() > maxShareBytes {
		return nil, fmt.Errorf("demand share of %d streams: %d bytes compressed, over %d", len(s.Streams), b.Len(), maxShareBytes)
	}
	return b.Bytes(), nil
}

// DecodeShare reads a stored share, strictly and within bounds.
func DecodeShare(b []byte) (Share, error) {
	var s Share
	if len(b) > maxShareBytes {
		return s, fmt.Errorf("demand share of %d bytes: over %d", len(b), maxShareBytes)
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return s, fmt.Errorf("demand share: %w", err)
	}
	doc, err := io.ReadAll(io.LimitReader(zr, maxShareDocBytes+1))
	if err != nil {
		return s, fmt.Errorf("demand share: %w", err)
	}
	if len(doc) > maxShareDocBytes {
		return s, fmt.Errorf("demand share: over %d bytes decompressed", maxShareDocBytes)
	}
	if err := strictJSON(doc, &s); err != nil {
		return s, fmt.Errorf("demand share: %w", err)
	}
	if s.AgeMs < 0 {
		return s, fmt.Errorf("demand share: negative age %d ms", s.AgeMs)
	}
	return s, nil
}

// shares is what a replica knows of every replica's demand share.
type shares struct {
	mu    sync.Mutex
	byKey map[string]heldShare
	// ever: some share was seen; fresh: the newest date of a share counted
	// (what the demand is dated once every share is gone).
	ever  bool
	fresh time.Time
}

type heldShare struct {
	share Share
	at    time.Time // when the demand was measured, by this replica's clock
}

func (s *shares) init() { s.byKey = map[string]heldShare{} }

// runDemandWatch keeps the shares of every replica: a read of all, then a
// watch of their changes; a share deleted (its lease expired or revoked)
// stops counting.
func (r *Replica) runDemandWatch(ctx context.Context) error {
	for ctx.Err() == nil {
		tctx, cancel := context.WithTimeout(ctx, r.timeout)
		resp, err := r.cli.Get(tctx, r.keys.demand(), clientv3.WithPrefix())
		cancel()
		if err == nil {
			r.demand.mu.Lock()
			r.demand.byKey = map[string]heldShare{}
			r.demand.mu.Unlock()
			for _, kv := range resp.Kvs {
				r.takeShare(ctx, kv)
			}
			r.m.replicas.Set(float64(r.shareCount()))
			for wr := range r.cli.Watch(clientv3.WithRequireLeader(ctx), r.keys.demand(), clientv3.WithPrefix(), clientv3.WithRev(resp.Header.GetRevision()+1)) {
				if wr.Err() != nil {
					break
				}
				for _, ev := range wr.Events {
					if ev.Type == mvccpb.DELETE {
						r.demand.mu.Lock()
						delete(r.demand.byKey, string(ev.Kv.Key))
						r.demand.mu.Unlock()
						continue
					}
					r.takeShare(ctx, ev.Kv)
				}
				r.m.replicas.Set(float64(r.shareCount()))
			}
		}
		if !wait(ctx, r.o.Probe) {
			return nil
		}
	}
	return nil
}

// takeShare keeps the share in kv, dated now less its age; an unreadable
// one is dropped and counted.
func (r *Replica) takeShare(ctx context.Context, kv *mvccpb.KeyValue) {
	key := string(kv.Key)
	s, err := DecodeShare(kv.Value)
	r.demand.mu.Lock()
	defer r.demand.mu.Unlock()
	if err != nil {
		delete(r.demand.byKey, key)
		r.m.refused.Inc()
		r.log.WarnContext(ctx, "demand share refused", "key", strings.TrimPrefix(key, r.keys.demand()), "err", err)
		return
	}
	r.demand.ever = true
	r.demand.byKey[key] = heldShare{share: s, at: r.now().Add(-time.Duration(s.AgeMs) * time.Millisecond)}
}

func (r *Replica) shareCount() int {
	r.demand.mu.Lock()
	defer r.demand.mu.Unlock()
	return len(r.demand.byKey)
}

// Demand is the sum of every live replica's demand share and its date:
// the leader controller's DemandFunc. Shares older than
// controller.stale_after are left out (a replica that stopped writing);
// streams with unknown names or bad numbers are left out and counted.
// The date is the newest share's; with no share counted it is now if no
// share was ever seen, else the date of the last one, so the controller
// holds its weights once every replica's demand is gone.
func (r *Replica) Demand() (weights.Demand, time.Time) {
	now := r.now()
	stale := r.o.Config.Controller.StaleAfter.Std()
	r.demand.mu.Lock()
	defer r.demand.mu.Unlock()
	out := weights.Demand{}
	var newest time.Time
	for _, h := range r.demand.byKey {
		if now.Sub(h.at) > stale {
			continue
		}
		if h.at.After(newest) {
			newest = h.at
		}
		for _, st := range h.share.Streams {
			if err := r.checkStream(st); err != nil {
				r.m.refused.Inc()
				continue
			}
			k := weights.DemandKey{Source: st.Source, Model: st.Model, Priority: st.Priority}
			sum := out[k]
			sum.RequestsPerSecond = finite(sum.RequestsPerSecond + st.RPS)
			sum.CostPerSecond = finite(sum.CostPerSecond + st.Cost)
			out[k] = sum
		}
	}
	switch {
	case !newest.IsZero():
		r.demand.fresh = newest
		return out, newest
	case !r.demand.ever:
		return out, now
	}
	return out, r.demand.fresh
}

// checkStream refuses what the controller would refuse for the whole
// demand: unknown names, non-canonical models, bad numbers.
func (r *Replica) checkStream(st Stream) error {
	c := r.o.Config
	if _, ok := c.Source(st.Source); !ok {
		return errors.New("unknown source")
	}
	if m, ok := c.ResolveModel(st.Model); !ok || m != st.Model {
		return errors.New("unknown model")
	}
	if int(st.Priority) >= len(weights.Priorities) {
		return errors.New("unknown priority")
	}
	if bad(st.RPS) || bad(st.Cost) {
		return errors.New("bad rate")
	}
	return nil
}

func bad(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) || v < 0 }

// finite saturates a sum at the largest float64.
func finite(v float64) float64 { return min(v, math.MaxFloat64) }

// runDemandShare writes this replica's demand share every controller
// tick, on its session's lease.
func (r *Replica) runDemandShare(ctx context.Context) error {
	if r.o.Demand == nil {
		return nil
	}
	t := time.NewTicker(r.o.Config.Controller.Tick.Std())
	defer t.Stop()
	conflict := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		now := r.now()
		d, at := r.o.Demand(now)
		s := r.session.Load()
		if s == nil {
			continue // no lease: this interval's demand is not shared
		}
		err := r.writeShare(ctx, s.Lease(), NewShare(r.name, d, now.Sub(at)))
		var ce *conflictError
		switch {
		case errors.As(err, &ce):
			if !conflict {
				r.log.ErrorContext(ctx, "another live replica uses this replica's name: this replica's demand is not shared until that lease expires; give every replica its own ha.replica", "lease", ce.lease)
			}
			conflict = true
		case err != nil:
			r.log.DebugContext(ctx, "demand share not written", "err", err)
		default:
			conflict = false
		}
	}
}

// conflictError: the replica's demand key is held by another lease.
type conflictError struct{ lease string }

func (e *conflictError) Error() string { return "demand key held by lease " + e.lease }

// writeShare puts the share on lease, unless another lease holds the key
// (another live process with the same name).
func (r *Replica) writeShare(ctx context.Context, lease clientv3.LeaseID, s Share) error {
	b, err := s.Encode()
	if err != nil {
		return err
	}
	key := r.keys.demandOf(r.name)
	put := clientv3.OpPut(key, string(b), clientv3.WithLease(lease))
	tctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.cli.Txn(tctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).Then(put).Else(
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
		return &conflictError{lease: fmt.Sprintf("%x", kvs[0].Lease)}
	}
	return errors.New("demand key changed during the write")
}
