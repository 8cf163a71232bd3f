package ha

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/weights"
)

// DemandFunc returns this replica's measured demand since its last call
// and how fresh it is (demand.Aggregator.Rates).
type DemandFunc func(now time.Time) (weights.Demand, time.Time)

// Options configure a Replica.
type Options struct {
	// Config is validated and has an ha: section; required.
	Config *config.Config
	// Client talks to etcd; nil: dialled from Config.HA (and closed by
	// Close). Tests pass their own to cut a replica off.
	Client *clientv3.Client
	// Kube is the REST configuration of the API server of
	// ha.kubernetes; nil: built from Config (its kubernetes.api_servers
	// entry). Tests pass their own to cut a replica off.
	Kube *rest.Config
	// Name is the replica's name; "": Config.HA.Replica, else
	// DefaultName().
	Name string
	// Sinks serve the installed versions: each version is prepared by all,
	// then committed to all (controller.Sink). The leader feeds them through
	// etcd like every replica.
	Sinks []controller.Sink
	// Demand is this replica's measured demand, shared every controller
	// tick; nil: none.
	Demand DemandFunc
	// Lead runs while this replica leads, with a context that ends with
	// the term (lease lost, deposed, Run's context done). It publishes
	// through Publisher (the controller's sink). Returning ends the term
	// early: the replica resigns and campaigns again a lease TTL later.
	// nil: the replica never campaigns.
	Lead func(ctx context.Context) error
	// HistorySize is how many published versions the history keeps;
	// < 1: controller.DefaultHistorySize.
	HistorySize int
	// Probe is how often the replica checks etcd (and the version in
	// force) besides watching it; 0: one second.
	Probe    time.Duration
	Logger   *slog.Logger         // nil: discard
	Registry *prometheus.Registry // nil: metrics not exported
	Now      func() time.Time     // nil: time.Now
}

// Replica is one ILB replica of an HA group. Its methods are safe for
// concurrent use.
type Replica struct {
	o       Options
	name    string
	b       backend
	ttl     time.Duration
	timeout time.Duration // per etcd request
	cfgHash string
	log     *slog.Logger
	now     func() time.Time
	m       *metrics

	term atomic.Pointer[term] // nil while not leading
	// installMu orders installs and refreshes of the local sinks.
	installMu sync.Mutex
	installed atomic.Pointer[installation]
	seen      atomic.Pointer[record] // the newest record read from the backend
	published atomic.Pointer[weights.Weights]
	history   atomic.Pointer[[]controller.VersionSummary]
	leader    atomic.Pointer[string] // the leader's name, as last read
	health    atomic.Pointer[health]
	wake      chan struct{}         // asks the sync loop to read the backend now
	republish chan *weights.Weights // the leader's controller kept a version the backend does not hold
	demand    shares
}

// installation is what the local sinks serve.
type installation struct {
	w   *weights.Weights
	rec record // zero for a local first version (Bootstrap)
}

// health is the outcome of the last check of the backend.
type health struct {
	ok      bool
	err     string
	contact time.Time // the last answer
}

// namePattern is a replica name (config's name rule).
var namePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// New checks the options, dials etcd unless Options.Client is set (it
// does not wait for a connection) and registers the metrics.
func New(o Options) (*Replica, error) {
	if o.Config == nil || o.Config.HA == nil {
		return nil, errors.New("ha: Config with an ha: section is required")
	}
	h := o.Config.HA
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.HistorySize < 1 {
		o.HistorySize = controller.DefaultHistorySize
	}
	if o.Probe <= 0 {
		o.Probe = time.Second
	}
	name := o.Name
	if name == "" {
		name = h.Replica
	}
	if name == "" {
		name = DefaultName()
	}
	if !namePattern.MatchString(name) {
		return nil, fmt.Errorf("ha: replica name %q: want 1-63 letters, digits, '.', '_' or '-'", name)
	}
	r := &Replica{
		o: o, name: name, ttl: h.LeaseTTL.Std(), timeout: h.DialTimeout.Std(),
		cfgHash: ConfigHash(o.Config), log: o.Logger.With("replica", name), now: o.Now,
		wake: make(chan struct{}, 1), republish: make(chan *weights.Weights, 1),
	}
	r.demand.init()
	m, err := newMetrics(o.Registry, r)
	if err != nil {
		return nil, err
	}
	r.m = m
	if h.Kubernetes != nil {
		r.b, err = newKube(r, o.Kube)
	} else {
		r.b, err = newEtcd(r, o.Client)
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}

// DefaultName is a replica's name when none is configured: the host name
// and the process id (hostname-pid), with characters a name may not hold
// replaced by '-' and cut to 63 bytes.
func DefaultName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "ilb"
	}
	clean := []byte(host)
	for i, c := range clean {
		if !namePattern.Match([]byte{'a', c}) {
			clean[i] = '-'
		}
	}
	if !namePattern.Match(clean[:1]) {
		clean = append([]byte("ilb-"), clean...)
	}
	pid := "-" + strconv.Itoa(os.Getpid())
	return string(clean[:min(len(clean), 63-len(pid))]) + pid
}

// Name is the replica's name.
func (r *Replica) Name() string { return r.name }

// Close closes the client New dialled. Call it after Run returned.
func (r *Replica) Close() error { return r.b.close() }

// Run keeps a session, campaigns, installs published versions and
// shares demand until ctx is done. On the way out it gives up its
// session (within ha.dial_timeout): another replica leads at once, and
// this one's demand share no longer counts.
func (r *Replica) Run(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return r.b.run(gctx) })
	g.Go(func() error { return r.runSync(gctx) })
	g.Go(func() error { return r.runDemandShare(gctx) })
	return g.Wait()
}

// Bootstrap installs the version in force in the backend before the
// replica serves, so it serves what the others serve from its first
// request. When the backend holds none yet, or does not answer within
// ha.dial_timeout,
// it installs first() instead (the weights ILB computes alone at start)
// and says so; Run replaces it with the published version once it reads
// one.
func (r *Replica) Bootstrap(ctx context.Context, first func() (*weights.Weights, error)) error {
	if r.syncOnce(ctx) {
		return nil
	}
	w, err := first()
	if err != nil {
		return fmt.Errorf("ha: first weights: %w", err)
	}
	why := r.b.kind() + " holds no published version yet"
	if h := r.health.Load(); h == nil || !h.ok {
		why = r.b.kind() + " did not answer"
	}
	w = w.WithStatus("computed by this replica alone at start (" + why + "): replaced by the leader's version once read")
	if err := r.install(ctx, w, record{}); err != nil {
		return fmt.Errorf("ha: first weights: %w", err)
	}
	r.log.WarnContext(ctx, "serving weights computed alone until a published version is read", "reason", why, "version", w.Version())
	return nil
}

// install prepares w in every sink, then commits it to all.
func (r *Replica) install(ctx context.Context, w *weights.Weights, rec record) error {
	r.installMu.Lock()
	defer r.installMu.Unlock()
	commits := make([]func(), len(r.o.Sinks))
	for i, s := range r.o.Sinks {
		commit, err := s.Prepare(ctx, w)
		if err != nil {
			return fmt.Errorf("weights %s rejected by sink %d (%T): %w", w.Version(), i, s, err)
		}
		commits[i] = commit
	}
	for _, c := range commits {
		c()
	}
	r.installed.Store(&installation{w: w, rec: rec})
	return nil
}

// refresher is a sink that takes the fresh weights of a tick whose
// version did not change (controller.MetricsSink).
type refresher interface{ Refresh(w *weights.Weights) }

// refresh hands the leader's fresh weights of an unchanged version to the
// local sinks that take them, as the single process does.
func (r *Replica) refresh(w *weights.Weights) {
	r.installMu.Lock()
	defer r.installMu.Unlock()
	cur := r.installed.Load()
	if cur == nil || cur.w.Version() != w.Version() {
		return
	}
	for _, s := range r.o.Sinks {
		if f, ok := s.(refresher); ok {
			f.Refresh(w)
		}
	}
	r.installed.Store(&installation{w: w, rec: cur.rec})
}

// Current is the version this replica serves (nil before Bootstrap):
// admin's and the dashboard's weights in force.
func (r *Replica) Current() *weights.Weights {
	if in := r.installed.Load(); in != nil {
		return in.w
	}
	return nil
}

// Versions returns up to n of the last published versions, newest first,
// as read from the backend (admin's /debug/weights/history): the history
// survives restarts of every replica. The summaries are shared: do not
// modify them.
func (r *Replica) Versions(n int) []controller.VersionSummary {
	h := r.history.Load()
	if h == nil {
		return nil
	}
	return append([]controller.VersionSummary(nil), (*h)[:min(max(n, 0), len(*h))]...)
}

// Leading reports whether this replica leads now.
func (r *Replica) Leading() bool { return r.term.Load() != nil }

func (r *Replica) installedRecord() record {
	if in := r.installed.Load(); in != nil {
		return in.rec
	}
	return record{}
}

func (r *Replica) seenRecord() record {
	if s := r.seen.Load(); s != nil {
		return *s
	}
	return record{}
}

func (r *Replica) lastContact() time.Time {
	if h := r.health.Load(); h != nil {
		return h.contact
	}
	return time.Time{}
}

// wakeSync asks the sync loop to read the backend now.
func (r *Replica) wakeSync() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// done reports whether ctx is done.
func done(ctx context.Context) bool { return ctx.Err() != nil }

// wait waits d or until ctx is done; false when ctx is done.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
