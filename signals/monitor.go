package signals

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/config"
)

// Options configure a [Monitor].
type Options struct {
	// Config is the validated configuration; required. The monitor reads
	// Clusters and Signals and never modifies it.
	Config *config.Config
	// Logger receives state transitions (info) and discovery errors
	// (warn); nil discards.
	Logger *slog.Logger
	// Client makes the probes and scrapes; nil builds two, one for the
	// health probes and one for the metrics, each with its own pool of
	// keep-alive connections (so a slow or broken metrics body never
	// costs a probe its connection), dial and response-header timeouts of
	// Signals.Timeout, no proxy, no compression and no redirects. The
	// per-request deadline always comes from Signals.Timeout via context,
	// and starts once the scrape has a worker slot.
	Client *http.Client
	// Now is the clock; nil is time.Now. Inject it for tests.
	Now func() time.Time
	// Resolver resolves DNS discovery names; nil is net.DefaultResolver.
	Resolver Resolver
	// Discoverers gives, by cluster name, the discoverer of clusters whose
	// discovery the monitor cannot build itself (type kubernetes: package
	// kube's); it may also replace any cluster's. A Discoverer that is
	// also a [Watcher] is run again as soon as it reports a change. The
	// caller runs them (their watches) for as long as the monitor runs.
	Discoverers map[string]Discoverer
	// Registry receives the monitor's metrics; nil: no metrics.
	Registry *prometheus.Registry
	// OnChange is called from the monitor's goroutine after every change
	// of the snapshot's state (a replica state, the replica set, a
	// saturation mark), after the new snapshot is published.
	// healthChanged lists, in config order, the clusters whose number of
	// serving replicas changed (possibly none; a saturation change alone
	// lists nothing). It must not block for long: scrape results wait.
	OnChange func(s *Snapshot, healthChanged []string)
}

// Monitor watches the replicas of every engine cluster. Build it with
// [New], run it with [Monitor.Run]; [Monitor.Snapshot] may be called from
// any goroutine at any time.
type Monitor struct {
	cfg         *config.Config
	sig         config.Signals
	log         *slog.Logger
	client      *http.Client // metrics
	probeClient *http.Client // health probes
	now         func() time.Time
	jitter      func(addr string, n uint64) float64
	onChange    func(*Snapshot, []string)
	prom        *promMetrics
	clusters    []*cluster
	snap        atomic.Pointer[Snapshot]
	running     atomic.Bool

	// Worker bookkeeping: sem bounds scrapes in flight; done carries each
	// finished job's result, applied on the loop goroutine.
	sem      chan struct{}
	done     chan func()
	inflight int
	wg       sync.WaitGroup
	buffers  sync.Pool // *scrapeBuffers

	// Publishing: changed marks a state change (published at once, with
	// OnChange), dirty a value change (published within publishGap).
	changed, dirty bool
	lastPublish    time.Time
	wake           time.Time // earliest pending deadline of any replica or cluster
	lastServing    []int     // per cluster, at the last state publish

	// Blindness (blind.go): blind is nil while the monitor trusts what it
	// sees; lagUntil is when the last sign of its own lag stops counting,
	// lagReason that sign; blindDirty asks for a re-evaluation.
	blind      *Blind
	lagUntil   time.Time
	lagReason  string
	blindDirty bool
}

// cluster is the loop's view of one engine cluster.
type cluster struct {
	cfg            config.EngineCluster
	mapping        *mapping
	disc           Discoverer
	static         bool
	refresh        time.Duration
	nextDiscovery  time.Time
	discovering    bool
	discoveredOnce bool
	discErr        string
	discErrSince   time.Time
	// watcher is disc as a Watcher (nil when it is not one); rediscover
	// asks for a discovery as soon as the one in flight is applied.
	watcher    Watcher
	rediscover bool
	replicas   map[string]*replica
}

// New validates the options, compiles each cluster's metric mapping and
// discoverer, and publishes a first snapshot in which every static
// endpoint is starting (or ready, when Signals.Disabled: signals off means
// every configured endpoint counts as ready, and Run only waits).
func New(o Options) (*Monitor, error) {
	if o.Config == nil {
		return nil, errors.New("signals: Options.Config is required")
	}
	s := o.Config.Signals
	if s.Interval.Std() <= 0 || s.Timeout.Std() <= 0 || s.RetryDelay.Std() < 0 || s.Concurrency < 1 || s.MaxBodyBytes < 1 ||
		s.UnhealthyAfter < 1 || s.HealthyAfter < 1 || s.StaleAfter < 1 || s.Warmup.Std() < 0 {
		return nil, fmt.Errorf("signals: invalid settings %+v: validate the config first", s)
	}
	m := &Monitor{
		cfg: o.Config, sig: s, log: o.Logger, client: o.Client, now: o.Now, onChange: o.OnChange,
		jitter: defaultJitter,
		sem:    make(chan struct{}, s.Concurrency),
		done:   make(chan func(), s.Concurrency),
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if m.now == nil {
		m.now = time.Now
	}
	m.probeClient = m.client
	if m.client == nil {
		m.client, m.probeClient = defaultClient(s), defaultClient(s)
	}
	resolver := o.Resolver
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	names := make([]string, len(o.Config.Clusters))
	now := m.now()
	var errs []error
	for i, e := range o.Config.Clusters {
		names[i] = e.Name
		mp, err := mappingFor(o.Config, e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d, err := newDiscoverer(e, resolver, o.Discoverers)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		given := o.Discoverers[e.Name] != nil
		cl := &cluster{
			cfg: e, mapping: mp, disc: d, replicas: map[string]*replica{},
			static:  !given && (e.Discovery.Type == config.DiscoveryStatic || e.Discovery.Type == ""),
			refresh: e.Discovery.Refresh.Std(),
		}
		cl.watcher, _ = d.(Watcher)
		if cl.refresh <= 0 {
			cl.refresh = 10 * time.Second
		}
		if cl.static {
			cl.discoveredOnce = true
			for _, a := range e.Endpoints {
				r := newReplica(cl, a, now, true)
				if s.Disabled {
					r.state, r.reason = StateReady, "signals disabled"
				}
				cl.replicas[a] = r
			}
		}
		m.clusters = append(m.clusters, cl)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("signals: %w", err)
	}
	p, err := newPromMetrics(o.Registry, names)
	if err != nil {
		return nil, err
	}
	if o.Registry != nil {
		if err := o.Registry.Register(newDiscoveryStale(names, m.Snapshot, m.now)); err != nil {
			return nil, fmt.Errorf("signals metrics: %w", err)
		}
	}
	m.prom = p
	m.lastServing = make([]int, len(m.clusters))
	m.changed = true // sets the health baseline; OnChange is not called
	m.publish(now, false)
	return m, nil
}

// Snapshot returns the latest published snapshot; never nil. It is
// immutable and safe to read from any goroutine.
func (m *Monitor) Snapshot() *Snapshot { return m.snap.Load() }

// Blind returns why the monitor takes itself for blind in the latest
// snapshot, or "" when it does not (see "Blindness" in the package
// documentation). Safe from any goroutine; it is what the controller's
// blind guard reads (controller.Options.Blind).
func (m *Monitor) Blind() string {
	if b := m.Snapshot().Blind; b != nil {
		return b.Reason
	}
	return ""
}

// defaultClient is an HTTP client of the kind used when Options.Client is
// nil; the monitor builds one for probes and one for metrics.
func defaultClient(s config.Signals) *http.Client {
	idle := max(90*time.Second, 3*s.Interval.Std())
	return &http.Client{
		Transport: &http.Transport{
			DialContext:           (&net.Dialer{Timeout: s.Timeout.Std(), KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost:   2,
			MaxConnsPerHost:       4,
			IdleConnTimeout:       idle,
			ResponseHeaderTimeout: s.Timeout.Std(),
			// Scrapes stay in the data centre: compression would cost
			// CPU on both ends for little. MaxBodyBytes bounds the body.
			DisableCompression: true,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// defaultJitter maps (address, scrape number) to a fraction in
// [-0.1, 0.1), deterministically: FNV-1a of the address mixed with the
// count by splitmix64. Replicas spread over the interval without a shared
// random source, and tests can predict it.
func defaultJitter(addr string, n uint64) float64 {
	h := uint64(14695981039346656037)
	for i := range len(addr) {
		h ^= uint64(addr[i])
		h *= 1099511628211
	}
	x := h ^ (n * 0x9E3779B97F4A7C15)
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	x ^= x >> 31
	return float64(x>>11)/(1<<53)*0.2 - 0.1
}
