package ha

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ilbproject/ilb/weights"
)

// runSync installs the version in force whenever etcd's record of it
// changes (watched) and at least every Options.Probe (polled: the poll is
// also the check of etcd's health), until ctx is done.
func (r *Replica) runSync(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() { // owned by runSync: ends with ctx
		defer close(done)
		r.watchCurrent(ctx)
	}()
	defer func() { <-done }()
	st := newSyncState()
	t := time.NewTicker(r.o.Probe)
	defer t.Stop()
	for {
		r.sync(ctx, st)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-r.wake:
		}
	}
}

// watchCurrent wakes the sync loop on every change of the current key
// (and when the watch breaks: the loop's read then says why).
func (r *Replica) watchCurrent(ctx context.Context) {
	for ctx.Err() == nil {
		for resp := range r.cli.Watch(clientv3.WithRequireLeader(ctx), r.keys.current()) {
			r.wakeSync()
			if resp.Err() != nil {
				break
			}
		}
		if !wait(ctx, r.o.Probe) {
			return
		}
	}
}

// syncState is what the sync loop keeps between two reads.
type syncState struct {
	rev   int64                          // mod revision of the last record handled
	cache map[string][]weights.CellRoute // the routing of the versions the history lists
	// historyStale: the last read of the history failed; read it again.
	historyStale bool
}

func newSyncState() *syncState { return &syncState{cache: map[string][]weights.CellRoute{}} }

// syncOnce reads etcd once and installs the version in force; it reports
// whether this replica now serves a version published in etcd.
func (r *Replica) syncOnce(ctx context.Context) bool {
	r.sync(ctx, newSyncState())
	return r.installedRecord().Version != ""
}

// sync reads the record of the version in force and the leader's name
// (linearizable reads: a quorum answers); when the record changed since st.rev, it
// installs its version and refreshes the history. etcd's answer, or its
// silence, is the replica's view of etcd's health.
func (r *Replica) sync(ctx context.Context, st *syncState) {
	tctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	// Two reads rather than one transaction: the client retries a read on
	// another member when the one it uses fails, never a transaction.
	cur, err := r.cli.Get(tctx, r.keys.current())
	var lead *clientv3.GetResponse
	if err == nil {
		lead, err = r.cli.Get(tctx, r.keys.election()+"/", clientv3.WithFirstCreate()...)
	}
	if err != nil {
		if ctx.Err() == nil {
			r.setHealth(ctx, err)
		}
		return
	}
	r.setHealth(ctx, nil)
	leader := ""
	if len(lead.Kvs) > 0 {
		leader = string(lead.Kvs[0].Value)
	}
	r.leader.Store(&leader)
	kvs := cur.Kvs
	if len(kvs) == 0 || kvs[0].ModRevision == st.rev {
		if st.historyStale {
			st.historyStale = !r.refreshHistory(ctx, st.cache)
		}
		return
	}
	rev := kvs[0].ModRevision
	rec, err := decodeRecord(kvs[0].Value)
	if err != nil {
		r.m.installs.WithLabelValues("refused").Inc()
		r.log.ErrorContext(ctx, "the record of the version in force is not readable: keeping the installed weights", "revision", rev, "err", err)
		st.rev = rev
		return
	}
	r.seen.Store(&rec)
	if rec.Config != r.cfgHash {
		r.m.mismatch.Set(1)
		r.log.WarnContext(ctx, "the leader's configuration differs from this replica's: give every replica the same regions, network, sources, models, profiles, clusters and controller",
			"leader", rec.Leader, "version", rec.Version, "leader_config", rec.Config, "config", r.cfgHash)
	} else {
		r.m.mismatch.Set(0)
	}
	if err := r.installRecord(ctx, rec); err != nil {
		if errors.Is(err, errRetry) {
			r.m.installs.WithLabelValues("failed").Inc()
			r.log.WarnContext(ctx, "cannot read the published version: keeping the installed weights", "version", rec.Version, "err", err)
			return // read it again on the next probe
		}
		r.m.installs.WithLabelValues("refused").Inc()
		r.log.ErrorContext(ctx, "published version refused: keeping the installed weights", "version", rec.Version, "leader", rec.Leader, "err", err)
	}
	st.rev = rev
	st.historyStale = !r.refreshHistory(ctx, st.cache)
}

// errRetry marks a failure to read etcd (worth retrying), as opposed to a
// content or a sink that refuses the version.
var errRetry = errors.New("etcd read failed")

// installRecord installs rec's version unless it is the one served.
func (r *Replica) installRecord(ctx context.Context, rec record) error {
	if in := r.installed.Load(); in != nil && in.w.Version() == rec.Version {
		r.installMu.Lock()
		r.installed.Store(&installation{w: in.w, rec: rec}) // the same content, published again
		r.installMu.Unlock()
		return nil
	}
	w := r.published.Load() // this replica's own publication: no need to read it back
	if w == nil || w.Version() != rec.Version {
		var err error
		if w, err = r.fetch(ctx, rec.Version); err != nil {
			return err
		}
	}
	if err := r.install(ctx, w, rec); err != nil {
		return err
	}
	r.m.installs.WithLabelValues("installed").Inc()
	r.log.InfoContext(ctx, "weights installed", "version", rec.Version, "seq", rec.Seq, "leader", rec.Leader)
	return nil
}

// fetch reads and decodes the content of version v in one read.
func (r *Replica) fetch(ctx context.Context, v string) (*weights.Weights, error) {
	tctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.cli.Get(tctx, r.keys.version(v), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("%w: version %s: %w", errRetry, v, err)
	}
	var m meta
	var blob []byte
	found := false
	for _, kv := range resp.Kvs {
		switch k := string(kv.Key); {
		case k == r.keys.meta(v):
			if m, err = decodeMeta(kv.Value); err != nil {
				return nil, fmt.Errorf("version %s: %w", v, err)
			}
			found = true
		case strings.HasPrefix(k, r.keys.version(v)+"c/"):
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

// refreshHistory reads the history records and builds the summaries,
// reading the content of versions not in cache (and dropping from cache
// those no longer listed); false when a read failed.
func (r *Replica) refreshHistory(ctx context.Context, cache map[string][]weights.CellRoute) bool {
	tctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := r.cli.Get(tctx, r.keys.history(), clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByKey, clientv3.SortDescend), clientv3.WithLimit(int64(r.o.HistorySize)))
	if err != nil {
		r.log.DebugContext(ctx, "history: read", "err", err)
		return false
	}
	if in := r.installed.Load(); in != nil && in.rec.Version != "" {
		if _, ok := cache[in.rec.Version]; !ok {
			cache[in.rec.Version] = routes(in.w)
		}
	}
	out := make([]weights.VersionSummary, 0, len(resp.Kvs))
	listed := map[string]bool{}
	complete := true
	for _, kv := range resp.Kvs {
		rec, err := decodeRecord(kv.Value)
		if err != nil {
			r.log.DebugContext(ctx, "history: unreadable record", "key", string(kv.Key), "err", err)
			continue
		}
		cells, ok := cache[rec.Version]
		if !ok {
			w, err := r.fetch(ctx, rec.Version)
			if err != nil {
				r.log.DebugContext(ctx, "history: version content", "version", rec.Version, "err", err)
				complete = complete && !errors.Is(err, errRetry)
				continue
			}
			cells = routes(w)
			cache[rec.Version] = cells
		}
		listed[rec.Version] = true
		out = append(out, weights.VersionSummary{
			Version: rec.Version, Published: rec.Published, Computed: rec.Computed, Policy: rec.Policy, Status: rec.Status, Cells: cells,
		})
	}
	for v := range cache {
		if !listed[v] {
			delete(cache, v)
		}
	}
	r.history.Store(&out)
	return complete
}

// routes is the routing of every cell of w, as the history keeps it.
func routes(w *weights.Weights) []weights.CellRoute {
	cs := w.Cells()
	out := make([]weights.CellRoute, len(cs))
	for i, c := range cs {
		out[i] = weights.CellRoute{Source: c.Source, Model: c.Model, Targets: c.Targets, Shed: c.Shed}
	}
	return out
}

// setHealth records the outcome of a check of etcd, logging a change.
func (r *Replica) setHealth(ctx context.Context, err error) {
	prev := r.health.Load()
	h := &health{ok: err == nil}
	if prev != nil {
		h.contact = prev.contact
	}
	if err == nil {
		h.contact = r.now()
		r.m.reachable.Set(1)
	} else {
		h.err = err.Error()
		r.m.reachable.Set(0)
	}
	r.health.Store(h)
	version := ""
	if w := r.Current(); w != nil {
		version = w.Version()
	}
	switch {
	case err != nil && (prev == nil || prev.ok):
		r.log.WarnContext(ctx, "etcd unreachable: serving the last installed weights (fail static) until it answers", "version", version, "err", err)
	case err == nil && prev != nil && !prev.ok:
		r.log.InfoContext(ctx, "etcd reachable again", "version", version, "unreachable_for", r.now().Sub(prev.contact).Round(time.Millisecond))
	}
}
