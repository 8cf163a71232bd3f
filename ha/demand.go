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
	"sync"
	"time"

	"github.com/ilbproject/ilb/internal/bound"
	"github.com/ilbproject/ilb/weights"
)

// Share is one replica's measured demand as it stores it in the backend
// (etcd: under P demand/<replica> on its lease) every controller tick: the rates of
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
	until time.Time // zero: as long as its key lives (etcd); else when it stops counting
}

// live reports whether h counts at now.
func (h heldShare) live(now time.Time, stale time.Duration) bool {
	return !h.at.IsZero() && now.Sub(h.at) <= stale && (h.until.IsZero() || !now.After(h.until))
}

func (s *shares) init() { s.byKey = map[string]heldShare{} }

// resetShares forgets every share (before a fresh read of all).
func (r *Replica) resetShares() {
	r.demand.mu.Lock()
	defer r.demand.mu.Unlock()
	r.demand.byKey = map[string]heldShare{}
}

// dropShare forgets the share of replica name (its session ended).
func (r *Replica) dropShare(name string) {
	r.demand.mu.Lock()
	defer r.demand.mu.Unlock()
	delete(r.demand.byKey, name)
}

// takeShare keeps replica name's share b, which arrived at arrived (this
// replica's clock), dated that less its age; an unreadable one is dropped
// and counted. A zero arrival is a share of unknown age: kept, not
// counted until it arrives again. liveFor > 0 ends its life that long
// after its arrival unless it arrives again (a backend without leases).
func (r *Replica) takeShare(ctx context.Context, name string, b []byte, arrived time.Time, liveFor time.Duration) {
	s, err := DecodeShare(b)
	r.demand.mu.Lock()
	defer r.demand.mu.Unlock()
	if err != nil {
		delete(r.demand.byKey, name)
		r.m.refused.Inc()
		r.log.WarnContext(ctx, "demand share refused", "replica", bound.String(name, bound.Name), "err", err)
		return
	}
	if arrived.IsZero() {
		r.demand.byKey[name] = heldShare{share: s}
		return
	}
	r.demand.ever = true
	h := heldShare{share: s, at: arrived.Add(-time.Duration(s.AgeMs) * time.Millisecond)}
	if liveFor > 0 {
		h.until = arrived.Add(liveFor)
	}
	r.demand.byKey[name] = h
}

// shareCount is how many shares are live: dated within
// controller.stale_after (those Demand sums).
func (r *Replica) shareCount() int {
	now := r.now()
	stale := r.o.Config.Controller.StaleAfter.Std()
	r.demand.mu.Lock()
	defer r.demand.mu.Unlock()
	n := 0
	for _, h := range r.demand.byKey {
		if h.live(now, stale) {
			n++
		}
	}
	return n
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
		if !h.live(now, stale) {
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
// tick (backend.writeShare).
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
		b, err := NewShare(r.name, d, now.Sub(at)).Encode()
		if err == nil {
			err = r.b.writeShare(ctx, b)
		}
		var ce *conflictError
		switch {
		case errors.As(err, &ce):
			if !conflict {
				r.log.ErrorContext(ctx, "another live replica uses this replica's name: this replica's demand is not shared until that one stops; give every replica its own ha.replica", "holder", ce.holder)
			}
			conflict = true
		case errors.Is(err, errNoSession):
			// no session: this interval's demand is not shared
		case err != nil:
			r.log.DebugContext(ctx, "demand share not written", "err", err)
		default:
			conflict = false
		}
	}
}

// conflictError: the replica's demand share is held by another live
// process (holder: its etcd lease, or its Kubernetes identity).
type conflictError struct{ holder string }

func (e *conflictError) Error() string { return "demand share held by " + e.holder }
