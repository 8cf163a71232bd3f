package ha

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/ilbproject/ilb/config"
)

// Dial returns an etcd client of the ha: section's endpoints (with its
// TLS files read once). It does not wait for a connection: the first
// request does, bounded by its context. The client's own logs are off:
// the replica logs what its requests meet.
func Dial(h *config.HA) (*clientv3.Client, error) {
	cfg := clientv3.Config{
		Endpoints:   h.Endpoints,
		DialTimeout: h.DialTimeout.Std(),
		// gRPC keepalive: notice a member that stopped answering within
		// about a lease TTL. etcd refuses pings more often than every 5s
		// (--grpc-keepalive-min-time).
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: max(h.DialTimeout.Std(), time.Second),
		Logger:               zap.NewNop(),
	}
	if h.TLS.Enabled() {
		tc, err := tlsConfig(h.TLS)
		if err != nil {
			return nil, err
		}
		cfg.TLS = tc
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("ha: etcd client: %w", err)
	}
	return cli, nil
}

// tlsConfig builds the client TLS configuration of ha.tls.
func tlsConfig(t config.HATLS) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ha.tls.ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ha.tls.ca_file %s: %w", t.CAFile, errNoCerts)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("ha.tls.cert_file/key_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

var errNoCerts = errors.New("no PEM certificate in it")
