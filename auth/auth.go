package auth

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/ilbproject/ilb/config"
)

// CheckInterval is how often Run looks at the files for changes.
const CheckInterval = time.Second

// Options configure an Auth.
type Options struct {
	Config   *config.Config       // validated; required
	Logger   *slog.Logger         // nil: discard
	Registry *prometheus.Registry // nil: metrics are not exported
	// Now is the clock of expiry checks and of the refusal logs' rate
	// limit; nil: time.Now.
	Now func() time.Time
}

// Auth holds ILB's TLS material, its peers' identities and its refusal
// accounting. Build it with New; it is safe for concurrent use. The
// handshakes and authorizations read immutable snapshots behind atomic
// pointers; Check (called by Run every CheckInterval) swaps in new ones.
type Auth struct {
	cfg     *config.Config
	log     *slog.Logger
	now     func() time.Time
	metrics *metrics

	tlsFiles  tlsFiles // zero when security.tls is off
	bundle    atomic.Pointer[bundle]
	tokenPath string                            // "" when there is no token
	token     atomic.Pointer[[sha256.Size]byte] // the token's SHA-256

	// clientCerts: the gRPC ports require verified client certificates
	// (a client CA is configured); rules: peer rules restrict sources.
	clientCerts, rules bool
	sources            map[string]bool

	ids     identityCache
	limiter logLimiter

	mu       sync.Mutex // serialises Check; guards the watch states
	tlsWatch watchState
	tokWatch watchState
}

// watchState follows one set of files: the content in use, a bad
// content seen once (reported when it is still there at the next check:
// a rotation that writes the certificate and the key one after the
// other is not an error), and the bad content reported last.
type watchState struct {
	cur, pending, bad [sha256.Size]byte
}

// New loads the files the configuration's security section names. A
// file that cannot be read or is invalid (unparsable, a key that does
// not match the certificate, an expired certificate, a CA bundle
// holding anything but certificates, an empty token) is an error naming
// the file and the problem.
func New(o Options) (*Auth, error) {
	if o.Config == nil {
		return nil, errors.New("auth: Config is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := o.Config.Security
	a := &Auth{
		cfg: o.Config, log: o.Logger, now: o.Now,
		clientCerts: s.TLS.Enabled() && s.TLS.ClientCAFile != "",
		rules:       len(s.Peers) > 0,
		sources:     map[string]bool{},
		tokenPath:   s.Admin.TokenFile,
	}
	a.limiter.every = time.Minute
	for _, src := range o.Config.Sources {
		a.sources[src.Name] = true
	}
	if s.TLS.Enabled() {
		a.tlsFiles = tlsFiles{cert: s.TLS.CertFile, key: s.TLS.KeyFile, clientCA: s.TLS.ClientCAFile, adminClientCerts: s.Admin.ClientCerts}
		f, err := readFiles(a.tlsFiles.names())
		if err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		b, err := a.tlsFiles.build(f, a.now())
		if err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		a.bundle.Store(b)
		a.tlsWatch.cur = f.sum
	}
	if a.tokenPath != "" {
		f, err := readFiles([]string{"security.admin.token_file"}, []string{a.tokenPath})
		if err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		tok, err := parseToken(a.tokenPath, f.data[0])
		if err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		sum := sha256.Sum256(tok)
		a.token.Store(&sum)
		a.tokWatch.cur = f.sum
	}
	m, err := newMetrics(o.Registry, a)
	if err != nil {
		return nil, err
	}
	a.metrics = m
	return a, nil
}

// Run checks the files every CheckInterval until ctx is done.
func (a *Auth) Run(ctx context.Context) error {
	if !a.TLSEnabled() && a.tokenPath == "" {
		return nil
	}
	t := time.NewTicker(CheckInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			a.Check(ctx)
		}
	}
}

// Check re-reads the files and swaps in the material of those that
// changed. A change that is invalid keeps the material in use; it is
// logged and counted (ilb_tls_reloads_total{result="error"}) once, when
// a second check finds the same bad content (a rotation in progress is
// not an error). A valid change counts result="ok".
func (a *Auth) Check(ctx context.Context) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.TLSEnabled() {
		a.tlsWatch.check(ctx, a, "TLS files", a.tlsFiles.names, func(f files) error {
			b, err := a.tlsFiles.build(f, a.now())
			if err != nil {
				return err
			}
			a.bundle.Store(b)
			a.log.InfoContext(ctx, "auth: TLS files reloaded", "cert_file", a.tlsFiles.cert,
				"not_after", b.cert.Leaf.NotAfter.UTC().Format(time.RFC3339), "client_ca", b.clientCAs != nil)
			return nil
		}, a.metrics.reloaded)
	}
	if a.tokenPath != "" {
		names := func() ([]string, []string) { return []string{"security.admin.token_file"}, []string{a.tokenPath} }
		a.tokWatch.check(ctx, a, "admin token file", names, func(f files) error {
			tok, err := parseToken(a.tokenPath, f.data[0])
			if err != nil {
				return err
			}
			sum := sha256.Sum256(tok)
			a.token.Store(&sum)
			a.log.InfoContext(ctx, "auth: admin token file reloaded", "token_file", a.tokenPath)
			return nil
		}, func(string) {})
	}
}

// check is one look at a watched set of files; apply builds and swaps
// the new material, count counts the result ("ok", "error").
func (w *watchState) check(ctx context.Context, a *Auth, what string, names func() ([]string, []string),
	apply func(files) error, count func(result string),
) {
	f, err := readFiles(names())
	if err != nil {
		f.sum = sha256.Sum256([]byte(err.Error()))
	}
	switch f.sum {
	case w.cur:
		w.pending, w.bad = [sha256.Size]byte{}, [sha256.Size]byte{}
		return
	case w.bad:
		return
	}
	if err == nil {
		err = apply(f)
	}
	if err == nil {
		w.cur, w.pending, w.bad = f.sum, [sha256.Size]byte{}, [sha256.Size]byte{}
		count("ok")
		return
	}
	if f.sum != w.pending {
		w.pending = f.sum
		return
	}
	w.bad = f.sum
	count("error")
	a.log.ErrorContext(ctx, "auth: "+what+" changed but cannot be used; the previous ones stay in use", "err", err)
}

// TLSEnabled reports whether ILB serves TLS (security.tls).
func (a *Auth) TLSEnabled() bool { return a.tlsFiles.cert != "" }

// ClientCerts reports whether the gRPC ports require verified client
// certificates (security.tls.client_ca_file).
func (a *Auth) ClientCerts() bool { return a.clientCerts }

// GRPCServerOptions are the options of the gRPC server of port (PortXDS
// for ADS and LRS, PortExtProc): TLS credentials with the current
// material (and verified client certificates with a client CA) when
// security.tls is set, none otherwise. Failed handshakes count in
// ilb_tls_handshake_failures_total{port} and are logged at most once a
// minute per client host.
func (a *Auth) GRPCServerOptions(port Port) []grpc.ServerOption {
	if !a.TLSEnabled() {
		return nil
	}
	creds := credentials.NewTLS(a.config(func(b *bundle) *tls.Config { return b.grpc }))
	return []grpc.ServerOption{grpc.Creds(countingCreds{TransportCredentials: creds, a: a, port: port})}
}

// AdminTLSConfig is the admin server's TLS configuration, nil unless
// security.admin.tls: the current certificate, and verified client
// certificates with security.admin.client_certs.
func (a *Auth) AdminTLSConfig() *tls.Config {
	if !a.TLSEnabled() || !a.cfg.Security.Admin.TLS {
		return nil
	}
	return a.config(func(b *bundle) *tls.Config { return b.admin })
}

// config is a server configuration whose every handshake uses the
// bundle in force.
func (a *Auth) config(pick func(*bundle) *tls.Config) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return pick(a.bundle.Load()), nil
		},
	}
}

// NotAfter is when the serving certificate in use expires; zero without
// TLS.
func (a *Auth) NotAfter() time.Time {
	if b := a.bundle.Load(); b != nil {
		return b.cert.Leaf.NotAfter
	}
	return time.Time{}
}
