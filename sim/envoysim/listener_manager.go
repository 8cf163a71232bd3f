package envoysim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// drainTimeout bounds how long a removed or replaced listener waits for its
// requests in flight before its connections are closed.
const drainTimeout = 5 * time.Second

// runningListener is a bound listener and its HTTP server.
type runningListener struct {
	name  string
	addr  string // configured address
	codec codecKind
	ln    net.Listener
	srv   *http.Server
	cfg   atomic.Pointer[listenerConfig]
}

// listenerManager binds, serves, updates and drains listeners. Every
// goroutine it starts is tracked by wg.
type listenerManager struct {
	log     *slog.Logger
	handler func(rl *runningListener, w http.ResponseWriter, r *http.Request)

	mu      sync.Mutex
	running map[string]*runningListener
	wg      sync.WaitGroup
}

func newListenerManager(log *slog.Logger, handler func(*runningListener, http.ResponseWriter, *http.Request)) *listenerManager {
	return &listenerManager{log: log, handler: handler, running: map[string]*runningListener{}}
}

// addr returns the bound address of the named listener.
func (m *listenerManager) addr(name string) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rl, ok := m.running[name]
	if !ok {
		return "", false
	}
	return rl.ln.Addr().String(), true
}

// bound reports whether every named listener is bound.
func (m *listenerManager) bound(names []string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range names {
		if _, ok := m.running[n]; !ok {
			return false
		}
	}
	return true
}

// reconcile makes the running listeners match desired: a listener whose
// address and codec are unchanged keeps its socket and picks up the new
// configuration; a new or moved listener is bound first, so that a bind
// failure fails the whole update (which is then NACKed, like Envoy's
// listener manager) without touching the running listeners; a removed or
// replaced listener is drained. A listener whose codec changes on the same
// address is re-bound after its old socket is closed. Serving stops when ctx
// is done.
func (m *listenerManager) reconcile(ctx context.Context, desired map[string]*listenerConfig) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	type pending struct {
		cfg *listenerConfig
		ln  net.Listener
	}
	var fresh []pending
	var rebind []*listenerConfig
	var errs []error
	for name, cfg := range desired {
		rl, ok := m.running[name]
		switch {
		case ok && rl.addr == cfg.addr && rl.codec == cfg.hcm.codec:
			continue
		case ok && rl.addr == cfg.addr:
			rebind = append(rebind, cfg)
			continue
		}
		ln, err := listen(ctx, cfg)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		fresh = append(fresh, pending{cfg: cfg, ln: ln})
	}
	if err := errors.Join(errs...); err != nil {
		for _, p := range fresh {
			_ = p.ln.Close()
		}
		return err
	}
	for name, rl := range m.running {
		if cfg, ok := desired[name]; ok && rl.addr == cfg.addr && rl.codec == cfg.hcm.codec {
			rl.cfg.Store(cfg)
			continue
		}
		delete(m.running, name)
		_ = rl.ln.Close()
		m.drain(rl)
	}
	for _, cfg := range rebind {
		ln, err := listen(ctx, cfg)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		fresh = append(fresh, pending{cfg: cfg, ln: ln})
	}
	for _, p := range fresh {
		rl := m.serve(ctx, p.cfg, p.ln)
		m.running[rl.name] = rl
	}
	return errors.Join(errs...)
}

func listen(ctx context.Context, cfg *listenerConfig) (net.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", cfg.addr)
	if err != nil {
		return nil, fmt.Errorf("listener %q: cannot bind %s: %w", cfg.name, cfg.addr, err)
	}
	return ln, nil
}

func (m *listenerManager) serve(ctx context.Context, cfg *listenerConfig, ln net.Listener) *runningListener {
	rl := &runningListener{name: cfg.name, addr: cfg.addr, codec: cfg.hcm.codec, ln: ln}
	rl.cfg.Store(cfg)
	protocols := new(http.Protocols)
	switch cfg.hcm.codec {
	case codecHTTP1:
		protocols.SetHTTP1(true)
	case codecHTTP2:
		protocols.SetUnencryptedHTTP2(true)
	default:
		protocols.SetHTTP1(true)
		protocols.SetUnencryptedHTTP2(true)
	}
	rl.srv = &http.Server{
		Handler:     http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.handler(rl, w, r) }),
		Protocols:   protocols,
		BaseContext: func(net.Listener) context.Context { return ctx },
		ErrorLog:    slog.NewLogLogger(m.log.Handler(), slog.LevelDebug),
	}
	m.log.InfoContext(ctx, "listener bound", "listener", cfg.name, "address", ln.Addr().String())
	m.wg.Go(func() {
		if err := rl.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			m.log.DebugContext(ctx, "listener stopped", "listener", rl.name, "error", err)
		}
	})
	return rl
}

// drain stops accepting on rl and lets its requests finish for up to
// drainTimeout. The caller holds m.mu.
func (m *listenerManager) drain(rl *runningListener) {
	m.log.Info("listener removed", "listener", rl.name)
	m.wg.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
		defer cancel()
		if err := rl.srv.Shutdown(ctx); err != nil {
			_ = rl.srv.Close()
		}
	})
}

// stopAll drains every listener and waits for all serving goroutines.
func (m *listenerManager) stopAll() {
	m.mu.Lock()
	for name, rl := range m.running {
		delete(m.running, name)
		m.drain(rl)
	}
	m.mu.Unlock()
	m.wg.Wait()
}
