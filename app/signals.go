package app

import (
	"context"
	"math"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/ilbproject/ilb/live"
	"github.com/ilbproject/ilb/signals"
	"github.com/ilbproject/ilb/xds"
)

// onSignals carries a new signals snapshot to EDS and to the fast loop,
// and asks the controller for a tick when clusters' health changed. A
// snapshot older than the last one applied is dropped (its health change
// is already in the newer one).
func (a *App) onSignals(ctx context.Context, snap *signals.Snapshot, healthChanged []string) {
	if len(healthChanged) > 0 && a.Controller != nil {
		defer a.Controller.Trigger() // even when snap is dropped: the change happened
	}
	a.signalsMu.Lock()
	defer a.signalsMu.Unlock()
	if snap.At.Before(a.signalsAt) {
		return
	}
	a.signalsAt = snap.At
	a.observeCapacity(snap)
	// The fast loop first: by the time an Envoy has the EDS that drains
	// a replica, ext_proc no longer picks it (or steers by it).
	a.live = live.FromSignals(snap, a.Config.Controller.Capacity, a.live)
	a.ExtProc.SetLive(a.live)
	if err := a.XDS.SetEndpoints(ctx, endpointsOf(snap, a.Config.Envoy.SlowStart.Std() == 0)); err != nil {
		a.log.ErrorContext(ctx, "EDS update refused; Envoys keep the previous endpoints", "err", err)
	}
}

// followRamps pushes the snapshot to EDS and the fast loop every signals
// interval: OnChange fires on state changes only, and a warming replica's
// weight grows between them. Unchanged endpoints change nothing.
func (a *App) followRamps(ctx context.Context) error {
	t := time.NewTicker(a.Config.Signals.Interval.Std())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			a.onSignals(ctx, a.Signals.Snapshot(), nil)
		}
	}
}

// endpointsOf maps replica states to what EDS says: serving replicas are
// HEALTHY (ones not yet probed at a tenth of the weight), draining ones
// DRAINING, the others UNHEALTHY.
//
// A warming replica's traffic ramps up in one place only. With ramp
// (envoy.slow_start is 0) ILB ramps it: its weight follows its warm-up in
// quarters, rounded down (25 until it is half warm, 50, 75, then 100 when
// ready), so a warm-up costs every Envoy at most four EDS versions. Without, it has the full weight and Envoy's own slow
// start ramps a new host's share of picks.
func endpointsOf(snap *signals.Snapshot, ramp bool) xds.Endpoints {
	out := xds.Endpoints{}
	for _, r := range snap.Replicas {
		ep := xds.Endpoint{Address: r.Address, Health: corev3.HealthStatus_HEALTHY, Weight: xds.MaxWeight}
		switch r.State {
		case signals.StateWarming:
			if ramp {
				ep.Weight = uint32(max(1, math.Floor(r.Ramp*4)) * xds.MaxWeight / 4)
			}
		case signals.StateStarting:
			ep.Weight = xds.MaxWeight / 10
		case signals.StateDraining:
			ep.Health = corev3.HealthStatus_DRAINING
		case signals.StateUnhealthy:
			ep.Health = corev3.HealthStatus_UNHEALTHY
		}
		out[r.Cluster] = append(out[r.Cluster], ep)
	}
	for name := range snap.Clusters {
		if _, ok := out[name]; !ok {
			out[name] = []xds.Endpoint{} // known, with no replica: not the static list
		}
	}
	return out
}
