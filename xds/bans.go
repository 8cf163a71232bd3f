package xds

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// BanStore keeps the versions banned for each source where every ILB
// replica, and the next process, finds them (ha.Store: etcd). Values are
// opaque to the store. Safe for concurrent use; each call is bounded by
// ctx.
type BanStore interface {
	Put(ctx context.Context, ns, key string, value []byte) error
	List(ctx context.Context, ns string) (entries map[string][]byte, more bool, err error)
	Delete(ctx context.Context, ns, key string) error
}

// UseBans keeps banned versions in b, where every replica of an HA group
// and the next process find them: it reads those already there (a store
// that does not answer is read again by the rollout loop), each later ban
// is written there, and the rollout loop adopts the other replicas' every
// 2 s, rolling the source back when one is in force. Call it before
// serving. Without it this process alone remembers its bans.
func (s *Server) UseBans(ctx context.Context, b BanStore) {
	s.mu.Lock()
	s.bans, s.banRead = b, s.now()
	s.mu.Unlock()
	s.loadBans(ctx)
}

// banNamespace is the BanStore namespace of banned versions; a key is
// "source/type/version", its value the RejectedVersion as JSON.
const banNamespace = "xds-bans"

// How often the rollout loop reads the bans other replicas made, and how
// long one store call may take.
const (
	banSyncEvery = 2 * time.Second
	banCallLimit = 5 * time.Second
)

// banWrite is a ban to store (or, with del, a forgotten one to remove).
type banWrite struct {
	key string
	rv  RejectedVersion
	del bool
}

func banKey(source string, rv RejectedVersion) string {
	return source + "/" + rv.Type + "/" + rv.Version
}

// banned records a ban of source's rollout r (called under mu): kept,
// and queued for the store; a ban that pushes the oldest out queues its
// removal.
func (s *Server) banned(source string, r *rollout, rv RejectedVersion) {
	dropped := r.ban(rv)
	if s.bans != nil {
		for _, old := range dropped {
			s.banQueue = append(s.banQueue, banWrite{key: source + "/" + strings.Replace(old, " ", "/", 1), del: true})
		}
		s.banQueue = append(s.banQueue, banWrite{key: banKey(source, rv), rv: rv})
	}
	s.m.rejected.WithLabelValues(source).Set(float64(len(r.banned)))
}

// syncBans writes the queued bans to the store, and every banSyncEvery
// reads every replica's bans and adopts those this one lacks. Called by
// the rollout loop, without mu held across a store call. A write that
// fails is tried again at the next tick; one that keeps failing stays
// queued (the ban holds here meanwhile).
func (s *Server) syncBans(ctx context.Context, now time.Time) {
	if s.bans == nil {
		return
	}
	s.mu.Lock()
	queue := s.banQueue
	s.banQueue = nil
	read := now.Sub(s.banRead) >= banSyncEvery
	if read {
		s.banRead = now
	}
	s.mu.Unlock()
	var failed []banWrite
	for i, w := range queue {
		cctx, cancel := context.WithTimeout(ctx, banCallLimit)
		var err error
		if w.del {
			err = s.bans.Delete(cctx, banNamespace, w.key)
		} else {
			var b []byte
			if b, err = json.Marshal(w.rv); err == nil {
				err = s.bans.Put(cctx, banNamespace, w.key, b)
			}
		}
		cancel()
		if err != nil {
			s.log.WarnContext(ctx, "xds: storing a banned version failed; retried at the next tick", "key", w.key, "err", err)
			failed = queue[i:]
			break
		}
	}
	if len(failed) > 0 {
		s.mu.Lock()
		s.banQueue = append(failed, s.banQueue...)
		s.mu.Unlock()
	}
	if read {
		s.loadBans(ctx)
	}
}

// loadBans adopts every stored ban this server lacks: the version is
// banned for its source and, when it is in force, the source rolls back
// as after a quorum of its own Envoys (see nacked).
func (s *Server) loadBans(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, banCallLimit)
	entries, _, err := s.bans.List(cctx, banNamespace)
	cancel()
	if err != nil {
		s.log.WarnContext(ctx, "xds: reading the banned versions of the other replicas failed; retried", "err", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, b := range entries {
		source, _, ok := strings.Cut(key, "/")
		var rv RejectedVersion
		url, known := "", false
		if ok && json.Unmarshal(b, &rv) == nil {
			url, known = typeURL(rv.Type)
		}
		if !known || rv.Version == "" || banKey(source, rv) != key {
			s.log.WarnContext(ctx, "xds: a stored banned version is not one; ignored", "key", bounded(key, maxExcerpt))
			continue
		}
		if _, configured := s.cfg.Source(source); !configured {
			continue
		}
		// Stored by a replica, but bounded as a NACK's are here.
		rv.Node, rv.Message = boundedID(rv.Node), bounded(rv.Message, maxMessage)
		r := s.rollouts[source]
		if r == nil {
			r = newRollout()
			s.rollouts[source] = r
		}
		if _, have := r.banned[rv.Type+" "+rv.Version]; have {
			continue
		}
		r.ban(rv)
		s.m.rejected.WithLabelValues(source).Set(float64(len(r.banned)))
		s.log.InfoContext(ctx, "xds: version banned by another replica adopted", "source", source, "type", rv.Type, "version", rv.Version, "by", rv.By)
		if r.stable != nil && r.stable.GetVersion(url) == rv.Version || r.canary != nil && r.canary.GetVersion(url) == rv.Version {
			if err := s.rollBack(ctx, source, r); err != nil {
				s.log.ErrorContext(ctx, "xds: a version banned by another replica is in force here and cannot be rolled back; kept", "source", source, "err", err)
			}
		}
	}
}

// typeURL is the type URL of a short type name (cluster, endpoint,
// route, listener); false for any other name.
func typeURL(short string) (string, bool) {
	for _, t := range allTypes {
		if shortType(t) == short {
			return t, true
		}
	}
	return "", false
}

// rollBack moves source to its newest snapshot that an Envoy acknowledged
// in full and that holds no banned version; an error (nothing changed)
// when there is none. Called under mu.
func (s *Server) rollBack(ctx context.Context, source string, r *rollout) error {
	good := r.target(source)
	if good == nil {
		good = r.target(source + canarySuffix)
	}
	if good == nil {
		return fmt.Errorf("no earlier snapshot of %s without a banned version was acknowledged", source)
	}
	r.stable, r.canary, r.pending = good, good, false
	s.m.canary.WithLabelValues(source).Set(0)
	s.m.rollbacks.WithLabelValues(source).Inc()
	s.setKey(ctx, source, good)
	s.setKey(ctx, source+canarySuffix, good)
	return nil
}
