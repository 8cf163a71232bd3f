package auth

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"strings"

	"google.golang.org/grpc/credentials"

	"github.com/ilbproject/ilb/internal/bound"
)

// countingCreds are TLS transport credentials that count and log the
// handshakes that fail (a client without a certificate, or with one the
// client CA did not sign, never reaches a stream).
type countingCreds struct {
	credentials.TransportCredentials
	a    *Auth
	port Port
}

var _ credentials.TransportCredentials = countingCreds{}

func (c countingCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	nc, info, err := c.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		c.a.handshakeFailed(c.port, addrString(conn.RemoteAddr()), err.Error(), errors.Is(err, io.EOF))
	}
	return nc, info, err //nolint:wrapcheck // gRPC's own error
}

func (c countingCreds) Clone() credentials.TransportCredentials {
	return countingCreds{TransportCredentials: c.TransportCredentials.Clone(), a: c.a, port: c.port}
}

// handshakeFailed counts a failed TLS handshake in
// ilb_tls_handshake_failures_total{port} and logs it at most once a
// minute per port and client host. A connection closed before it said
// anything (a TCP probe: eof) is neither.
func (a *Auth) handshakeFailed(port Port, addr, msg string, eof bool) {
	if eof {
		return
	}
	a.metrics.handshakes.WithLabelValues(string(port)).Inc()
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	host = bound.String(host, bound.Name)
	ok, suppressed := a.limiter.allow(string(port)+"\x00tls\x00"+host, a.now())
	if !ok {
		return
	}
	a.log.Warn("auth: TLS handshake failed", "port", string(port), "peer", bound.String(addr, bound.Name),
		"err", bound.String(msg, bound.Message), "suppressed", suppressed)
}

// AdminErrorLog is the admin http.Server's ErrorLog: its TLS handshake
// failures are counted and logged as those of the gRPC ports; anything
// else it reports is logged as a warning.
func (a *Auth) AdminErrorLog() *log.Logger {
	return log.New(adminErrorWriter{a}, "", 0)
}

type adminErrorWriter struct{ a *Auth }

// Write takes one line of net/http's error log, such as
// "http: TLS handshake error from 127.0.0.1:5555: EOF".
func (w adminErrorWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	if rest, ok := strings.CutPrefix(line, "http: TLS handshake error from "); ok {
		addr, msg, _ := strings.Cut(rest, ": ")
		w.a.handshakeFailed(PortAdmin, addr, msg, msg == "EOF")
		return len(p), nil
	}
	w.a.log.WarnContext(context.Background(), "admin: http server", "err", bound.String(line, bound.Message))
	return len(p), nil
}
