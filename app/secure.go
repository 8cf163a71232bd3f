package app

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"

	"google.golang.org/grpc"

	"github.com/ilbproject/ilb/auth"
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/xds"
)

// The authorizers of package auth are the seams of the gRPC services.
var (
	_ xds.Authorizer     = (*auth.Authorizer)(nil)
	_ demand.Authorizer  = (*auth.Authorizer)(nil)
	_ extproc.Authorizer = (*auth.Authorizer)(nil)
)

// grpcServer is a gRPC server of port with ILB's transport security
// (TLS from security.tls, client certificates with a client CA) and
// opts.
func grpcServer(au *auth.Auth, port auth.Port, opts ...grpc.ServerOption) *grpc.Server {
	return grpc.NewServer(append(opts, au.GRPCServerOptions(port)...)...)
}

// secureAdmin wraps the admin listener in TLS when security.admin.tls.
func secureAdmin(au *auth.Auth, ln net.Listener) net.Listener {
	if cfg := au.AdminTLSConfig(); cfg != nil {
		return tls.NewListener(ln, cfg)
	}
	return ln
}

// warnInsecure logs a warning for every port bound off loopback that
// anyone who reaches it can use: without TLS, or (gRPC ports) without
// client certificates. The admin API off loopback without TLS or a
// token is a configuration error already.
func warnInsecure(ctx context.Context, log *slog.Logger, c *config.Config) {
	s := c.Security
	for _, p := range []struct{ field, addr, what string }{
		{"listen.xds", c.Listen.XDS, "any client can subscribe as any source (and read every cluster, endpoint and weight) and report load for it"},
		{"listen.extproc", c.Listen.ExtProc, "any client can send requests through ILB's routing as any source"},
	} {
		if config.IsLoopback(p.addr) {
			continue
		}
		switch {
		case !s.TLS.Enabled():
			log.WarnContext(ctx, "serving off loopback without TLS: "+p.what+"; set security.tls with a client_ca_file",
				"field", p.field, "addr", p.addr)
		case s.TLS.ClientCAFile == "":
			log.WarnContext(ctx, "serving off loopback without client certificates: "+p.what+"; set security.tls.client_ca_file",
				"field", p.field, "addr", p.addr)
		}
	}
	if !config.IsLoopback(c.Listen.Admin) && !s.Admin.TLS {
		log.WarnContext(ctx, "serving the admin API off loopback without TLS: its bearer token and answers travel in clear; set security.admin.tls",
			"field", "listen.admin", "addr", c.Listen.Admin)
	}
}

// AdminURL is the base URL of the admin API: https:// when it serves
// TLS.
func (a *App) AdminURL() string {
	if a.Auth != nil && a.Auth.AdminTLSConfig() != nil {
		return "https://" + a.AdminAddr()
	}
	return "http://" + a.AdminAddr()
}
