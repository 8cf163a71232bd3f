package signals

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Run watches the replicas until ctx is done, then waits for its workers
// and returns nil. Every goroutine it starts stops on ctx.Done(). Run may
// be called once per Monitor.
func (m *Monitor) Run(ctx context.Context) error {
	if !m.running.CompareAndSwap(false, true) {
		return errors.New("signals: Run called twice")
	}
	if m.sig.Disabled {
		<-ctx.Done()
		return nil
	}
	defer m.wg.Wait()
	kick := m.forwardWatchers(ctx)
	timer := time.NewTimer(0)
	defer timer.Stop()
	gap := m.publishGap()
	interval := m.sig.Interval.Std()
	for {
		now := m.now()
		if !now.Before(m.wake) {
			m.tick(ctx, now)
		} else if m.blindDirty {
			m.evalBlind(now)
		}
		m.maybePublish(now, gap)
		next := m.wake
		if m.dirty && m.lastPublish.Add(gap).Before(next) {
			next = m.lastPublish.Add(gap)
		}
		armed := m.now()
		d := min(max(next.Sub(armed), interval/100), interval)
		timer.Reset(d)
		select {
		case <-ctx.Done():
			return nil
		case f := <-m.done:
			m.applyDone(f)
			for more := true; more; {
				select {
				case f := <-m.done:
					m.applyDone(f)
				default:
					more = false
				}
			}
		case cl := <-kick:
			m.rediscoverNow(cl)
		case <-timer.C:
		}
		// A loop that wakes much later than it asked to is starved (CPU,
		// a slow OnChange): what its probes report then is not the fleet.
		if late := m.now().Sub(armed.Add(d)); late > interval {
			m.noteLag(m.now(), fmt.Sprintf("the signals loop woke %s late (interval %s)", late.Round(time.Millisecond), m.sig.Interval))
		}
	}
}

// forwardWatchers starts, for each cluster whose discoverer is a
// Watcher, a goroutine (stopped by ctx) that passes its changes to the
// returned channel.
func (m *Monitor) forwardWatchers(ctx context.Context) <-chan *cluster {
	kick := make(chan *cluster, len(m.clusters))
	for _, cl := range m.clusters {
		if cl.watcher == nil {
			continue
		}
		changed := cl.watcher.Changed()
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case <-changed:
				}
				select {
				case kick <- cl:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	return kick
}

// rediscoverNow makes cl's discovery due at once, or as soon as the one
// in flight is applied.
func (m *Monitor) rediscoverNow(cl *cluster) {
	if cl.discovering {
		cl.rediscover = true
		return
	}
	now := m.now()
	cl.nextDiscovery = now
	m.wake = now
}

// step runs one deterministic round at m.now() for tests: discover what is
// due, scrape what is due (new replicas included), wait for every job and
// publish. It must not run concurrently with Run.
func (m *Monitor) step(ctx context.Context) {
	now := m.now()
	m.tick(ctx, now)
	m.waitAll(ctx)
	m.tick(ctx, now) // scrape the replicas the discoveries just added
	m.waitAll(ctx)
	m.evalBlind(now)
	for _, cl := range m.clusters { // time transitions after the results
		for _, r := range cl.replicas {
			m.timeTransitions(r, now)
		}
	}
	if m.changed || m.dirty {
		m.publish(now, true)
	}
}

// waitAll applies finished jobs until none is in flight.
func (m *Monitor) waitAll(ctx context.Context) {
	for m.inflight > 0 {
		select {
		case f := <-m.done:
			m.applyDone(f)
		case <-ctx.Done():
			return
		}
	}
}

func (m *Monitor) applyDone(f func()) {
	m.inflight--
	f()
}

// publishGap is the least time between two publications of value-only
// changes while Run runs.
func (m *Monitor) publishGap() time.Duration { return m.sig.Interval.Std() / 10 }

// maybePublish publishes state changes at once and value changes at most
// every gap.
func (m *Monitor) maybePublish(now time.Time, gap time.Duration) {
	if m.changed || (m.dirty && !now.Before(m.lastPublish.Add(gap))) {
		m.publish(now, true)
	}
}

// tick does everything due at now: removals, time transitions, discovery
// and scrape dispatch. It records the next deadline in m.wake.
func (m *Monitor) tick(ctx context.Context, now time.Time) {
	var wake time.Time
	soonest := func(t time.Time) {
		if !t.IsZero() && (wake.IsZero() || t.Before(wake)) {
			wake = t
		}
	}
	m.evalBlind(now)
	if m.lagUntil.After(now) {
		soonest(m.lagUntil)
	}
	for _, cl := range m.clusters {
		if !cl.static && !cl.discovering {
			if !now.Before(cl.nextDiscovery) {
				m.dispatchDiscovery(ctx, cl, now)
			} else {
				soonest(cl.nextDiscovery)
			}
		}
		for addr, r := range cl.replicas {
			if !r.removeAt.IsZero() && !now.Before(r.removeAt) {
				delete(cl.replicas, addr)
				m.log.InfoContext(ctx, "replica removed", "cluster", cl.cfg.Name, "address", addr)
				m.changed = true
				continue
			}
			m.timeTransitions(r, now)
			if r.state == StateWarming {
				m.dirty = true // the ramp grows
			}
			if !r.inFlight && r.removeAt.IsZero() && !now.Before(r.nextAt) {
				m.dispatchScrape(ctx, r, now)
			}
			soonest(m.deadline(r))
		}
	}
	if wake.IsZero() {
		wake = now.Add(m.sig.Interval.Std())
	}
	m.wake = wake
}

// wakeBy makes the loop tick no later than t (zero: no deadline).
func (m *Monitor) wakeBy(t time.Time) {
	if !t.IsZero() && t.Before(m.wake) {
		m.wake = t
	}
}

// dispatchScrape starts a worker that scrapes r; its result is applied on
// the loop goroutine.
func (m *Monitor) dispatchScrape(ctx context.Context, r *replica, at time.Time) {
	r.inFlight = true
	m.inflight++
	m.wg.Add(1)
	cl, addr := r.cl, r.addr
	go func() {
		defer m.wg.Done()
		select {
		case m.sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		waited := m.now().Sub(at) // the requests' timeouts start now
		res := m.scrape(ctx, cl, addr)
		res.slotWait = waited
		<-m.sem
		select {
		case m.done <- func() { m.applyScrape(r, res, at); m.wakeBy(m.deadline(r)) }:
		case <-ctx.Done():
		}
	}()
}

// dispatchDiscovery starts a worker that runs cl's discoverer, bounded by
// its refresh period (at most 10s).
func (m *Monitor) dispatchDiscovery(ctx context.Context, cl *cluster, at time.Time) {
	cl.discovering = true
	m.inflight++
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		dctx, cancel := context.WithTimeout(ctx, min(cl.refresh, 10*time.Second))
		targets, err := cl.disc.Discover(dctx)
		cancel()
		select {
		case m.done <- func() { m.applyDiscovery(cl, targets, err, at) }:
		case <-ctx.Done():
		}
	}()
}
