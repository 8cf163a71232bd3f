package ha

import (
	"context"
	"errors"
	"time"

	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/weights"
)

// runSync installs the version in force whenever the backend's record
// of it changes (the backend wakes it) and at least every Options.Probe
// (polled: the poll is also the check of the backend's health), until
// ctx is done.
func (r *Replica) runSync(ctx context.Context) error {
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

// syncState is what the sync loop keeps between two reads.
type syncState struct {
	token string                            // the backend's token of the last record handled
	cache map[string][]controller.CellRoute // the routing of the versions the history lists
	// historyStale: the last read of the history failed; read it again.
	historyStale bool
}

func newSyncState() *syncState { return &syncState{cache: map[string][]controller.CellRoute{}} }

// syncOnce reads the backend once and installs the version in force; it reports
// whether this replica now serves a version published in the backend.
func (r *Replica) syncOnce(ctx context.Context) bool {
	r.sync(ctx, newSyncState())
	return r.installedRecord().Version != ""
}

// sync reads the record of the version in force and the leader's name;
// when the record changed since st.token, it installs its version and
// refreshes the history. The backend's answer, or its silence, is the
// replica's view of its health.
func (r *Replica) sync(ctx context.Context, st *syncState) {
	cur, err := r.b.readCurrent(ctx)
	if err != nil {
		if ctx.Err() == nil {
			r.setHealth(ctx, err)
		}
		return
	}
	r.setHealth(ctx, nil)
	r.leader.Store(&cur.leader)
	if cur.rec == nil || cur.token == st.token {
		if st.historyStale {
			st.historyStale = !r.refreshHistory(ctx, st.cache)
		}
		return
	}
	rev := cur.token
	rec, err := decodeRecord(cur.rec)
	if err != nil {
		r.m.installs.WithLabelValues("refused").Inc()
		r.log.ErrorContext(ctx, "the record of the version in force is not readable: keeping the installed weights", "token", rev, "err", err)
		st.token = rev
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
	st.token = rev
	st.historyStale = !r.refreshHistory(ctx, st.cache)
}

// errRetry marks a failure to read the backend (worth retrying), as opposed to a
// content or a sink that refuses the version.
var errRetry = errors.New("read failed")

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
		if w, err = r.b.fetch(ctx, rec); err != nil {
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

// refreshHistory reads the history records and builds the summaries,
// reading the content of versions not in cache (and dropping from cache
// those no longer listed); false when a read failed.
func (r *Replica) refreshHistory(ctx context.Context, cache map[string][]controller.CellRoute) bool {
	recs, err := r.b.history(ctx, r.o.HistorySize)
	if err != nil {
		r.log.DebugContext(ctx, "history: read", "err", err)
		return false
	}
	if in := r.installed.Load(); in != nil && in.rec.Version != "" {
		if _, ok := cache[in.rec.Version]; !ok {
			cache[in.rec.Version] = routes(in.w)
		}
	}
	out := make([]controller.VersionSummary, 0, len(recs))
	listed := map[string]bool{}
	complete := true
	for i, b := range recs {
		rec, err := decodeRecord(b)
		if err != nil {
			r.log.DebugContext(ctx, "history: unreadable record", "index", i, "err", err)
			continue
		}
		cells, ok := cache[rec.Version]
		if !ok {
			w, err := r.b.fetch(ctx, rec)
			if err != nil {
				r.log.DebugContext(ctx, "history: version content", "version", rec.Version, "err", err)
				complete = complete && !errors.Is(err, errRetry)
				continue
			}
			cells = routes(w)
			cache[rec.Version] = cells
		}
		listed[rec.Version] = true
		out = append(out, controller.VersionSummary{
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
func routes(w *weights.Weights) []controller.CellRoute {
	cs := w.Cells()
	out := make([]controller.CellRoute, len(cs))
	for i, c := range cs {
		out[i] = controller.CellRoute{Source: c.Source, Model: c.Model, Targets: c.Targets, Shed: c.Shed}
	}
	return out
}

// setHealth records the outcome of a check of the backend, logging a change.
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
		r.log.WarnContext(ctx, "HA backend unreachable: serving the last installed weights (fail static) until it answers", "backend", r.b.kind(), "version", version, "err", err)
	case err == nil && prev != nil && !prev.ok:
		r.log.InfoContext(ctx, "HA backend reachable again", "backend", r.b.kind(), "version", version, "unreachable_for", r.now().Sub(prev.contact).Round(time.Millisecond))
	}
}
