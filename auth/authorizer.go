package auth

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ilbproject/ilb/internal/bound"
)

// Port names one of ILB's ports, the port label of
// ilb_auth_refusals_total.
type Port string

// ILB's ports.
const (
	PortXDS     Port = "xds"
	PortLRS     Port = "lrs"
	PortExtProc Port = "extproc"
	PortAdmin   Port = "admin"
)

// Authorizer decides whether the peer of a gRPC stream may speak for a
// source on one port. It satisfies the Authorizer interfaces of packages
// xds, demand and extproc. Safe for concurrent use.
type Authorizer struct {
	a    *Auth
	port Port
}

// Authorizer is the authorizer of port (PortXDS, PortLRS or
// PortExtProc).
func (a *Auth) Authorizer(port Port) *Authorizer { return &Authorizer{a: a, port: port} }

// Authorize lets the stream's peer speak for source, or returns the
// gRPC status that ends the stream:
//
//   - no client CA configured (or no TLS): every peer may;
//   - no verified client certificate: Unauthenticated;
//   - a source the configuration does not know: PermissionDenied;
//   - peer rules configured and none gives the certificate's identity
//     the source: PermissionDenied naming the identity and the source
//     (and no other source);
//   - otherwise (no peer rule at all): every verified peer may.
//
// Each refusal counts in ilb_auth_refusals_total{port,reason} and is
// logged at most once a minute per port, identity and source. The
// verdict on a certificate is cached: a stream costs one map lookup.
func (z *Authorizer) Authorize(ctx context.Context, source string) error {
	a := z.a
	if !a.clientCerts {
		return nil
	}
	leaf, addr := verifiedLeaf(ctx)
	if leaf == nil {
		return z.refuse(ctx, ReasonNoIdentity, addr, "", source, codes.Unauthenticated,
			fmt.Sprintf("ilb %s: no verified client certificate: present one signed by ILB's client CA", z.port))
	}
	p := a.ids.get(a.cfg, leaf)
	if !a.sources[source] {
		return z.refuse(ctx, ReasonUnknownSource, addr, p.id.Name, source, codes.PermissionDenied,
			fmt.Sprintf("ilb %s: source %s is not configured", z.port, bound.Quote(source, bound.Name)))
	}
	if !a.rules || p.sources[source] {
		return nil
	}
	return z.refuse(ctx, ReasonSourceNotAllowed, addr, p.id.Name, source, codes.PermissionDenied,
		fmt.Sprintf("ilb %s: identity %s may not speak for source %s", z.port, bound.Quote(p.id.Name, bound.Name), bound.Quote(source, bound.Name)))
}

func (z *Authorizer) refuse(ctx context.Context, reason string, addr net.Addr, identity, source string, code codes.Code, msg string) error {
	z.a.metrics.refused(z.port, reason)
	z.a.logRefusal(ctx, z.port, reason, addrString(addr), identity, source)
	return status.Error(code, msg)
}

// logRefusal logs a refusal at most once a minute per port, identity
// and source (for a peer without identity, its address stands in), with
// how many refusals of the same key were not logged since.
func (a *Auth) logRefusal(ctx context.Context, port Port, reason, addr, identity, source string) {
	addr, identity, source = bound.String(addr, bound.Name), bound.String(identity, bound.Name), bound.String(source, bound.Name)
	who := identity
	if who == "" {
		who = "addr " + addr
	}
	ok, suppressed := a.limiter.allow(string(port)+"\x00"+who+"\x00"+source, a.now())
	if !ok {
		return
	}
	a.log.WarnContext(ctx, "auth: peer refused", "port", string(port), "reason", reason, "peer", addr,
		"identity", identity, "source", source, "suppressed", suppressed)
}

// Voter names the stream's peer for a quorum of Envoys (the xDS NACK
// quorum): its verified identity and IP address ("spiffe://…/edge-us@
// 10.1.2.3"), or its IP address alone without a verified certificate.
// One process holding a certificate counts once however many node ids it
// claims; Envoys sharing an identity count once per address (one per pod,
// the usual deployment). Without TLS nothing is verified: the address is
// the only thing a peer cannot choose freely on an established
// connection.
func (z *Authorizer) Voter(ctx context.Context) string {
	leaf, addr := verifiedLeaf(ctx)
	ip := addrString(addr)
	if host, _, err := net.SplitHostPort(ip); err == nil {
		ip = host
	}
	if leaf == nil {
		return ip
	}
	return z.a.ids.get(z.a.cfg, leaf).id.Name + "@" + ip
}
