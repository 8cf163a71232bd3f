package stack

import (
	"context"
	"fmt"
	"strings"

	"github.com/ilbproject/ilb/app"
	"github.com/ilbproject/ilb/config"
)

// Replica is one ILB replica of a stack run with Options.HA. Envoys
// reach its xDS and ext_proc ports through proxies that CrashReplica cuts.
type Replica struct {
	App          *app.App
	stop         context.CancelFunc
	xds, extproc *cutProxy
}

// startReplicas runs Options.Replicas ILB replicas of cfg on the etcd of
// Options.HA, each on its own ephemeral ports and with its own replica
// name; s.App is the first.
func (s *Stack) startReplicas(ctx context.Context, cfg *config.Config) error {
	n := s.opts.Replicas
	if n < 2 {
		return fmt.Errorf("stack: Options.HA with %d replicas: want at least 2", n)
	}
	for i := range n {
		rc := *cfg
		h := *s.opts.HA
		h.Replica = fmt.Sprintf("ilb-%d", i)
		rc.HA = &h
		actx, cancel := context.WithCancel(ctx)
		a, err := app.Start(actx, app.Options{Config: &rc, Logger: s.opts.Logger.With("component", "ilb", "replica", h.Replica), Rand: s.rand})
		if err != nil {
			cancel()
			return fmt.Errorf("stack: replica %s: %w", h.Replica, err)
		}
		go func() {
			select {
			case <-s.done:
			case <-actx.Done():
			}
			cancel()
		}()
		// The proxies live as long as the stack, not the replica: a stop
		// must reach the Envoys as the replica's own graceful close.
		r := &Replica{App: a, stop: cancel}
		if r.xds, err = newCutProxy(ctx, a.XDSAddr()); err != nil {
			return err
		}
		if r.extproc, err = newCutProxy(ctx, a.ExtProcAddr()); err != nil {
			return err
		}
		s.Replicas = append(s.Replicas, r)
		s.group.Go(a.Wait)
	}
	s.App = s.Replicas[0].App
	return nil
}

// StopReplica stops replica i as an orchestrator stops a pod (SIGTERM):
// its servers stop accepting, finish what they hold within their grace
// period, and it leaves etcd (its leadership and lease end). It returns
// once the replica is down.
func (s *Stack) StopReplica(i int) error {
	r := s.Replicas[i]
	r.stop()
	err := r.App.Wait()
	r.xds.reset() // a stopped replica's ports refuse connections
	r.extproc.reset()
	if err != nil {
		return fmt.Errorf("stack: stopping replica %d: %w", i, err)
	}
	return nil
}

// CrashReplica makes replica i die in the eyes of its Envoys, as a killed
// process does: every connection they have to it is reset at once, in
// the middle of whatever exchange it carries, and new ones are refused;
// then the replica stops (its leadership ends). It returns once it is
// down.
func (s *Stack) CrashReplica(i int) error {
	r := s.Replicas[i]
	r.xds.reset()
	r.extproc.reset()
	return s.StopReplica(i)
}

// Leader is the index of the replica that leads, -1 if none does.
func (s *Stack) Leader() int {
	for i, r := range s.Replicas {
		if r.App.HA != nil && r.App.HA.Leading() {
			return i
		}
	}
	return -1
}

// xdsAddrs and extprocAddrs are what Envoys list: every replica's
// address, comma-separated, or the one ILB's.
func (s *Stack) xdsAddrs() string {
	if len(s.Replicas) == 0 {
		return s.App.XDSAddr()
	}
	var out []string
	for _, r := range s.Replicas {
		out = append(out, r.xds.addr())
	}
	return strings.Join(out, ",")
}

func (s *Stack) extprocAddrs() string {
	if len(s.Replicas) == 0 {
		return s.App.ExtProcAddr()
	}
	var out []string
	for _, r := range s.Replicas {
		out = append(out, r.extproc.addr())
	}
	return strings.Join(out, ",")
}
