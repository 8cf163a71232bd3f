package auth

import (
	"context"
	"crypto/x509"
	"maps"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/internal/bound"
)

// Bounds of the identity cache and of identities.
const (
	// maxCachedCerts and maxCachedBytes bound the identity cache; when
	// either would be passed, it starts afresh.
	maxCachedCerts = 4096
	maxCachedBytes = 8 << 20
	// maxIdentityBytes: a longer name (SPIFFE IDs are at most 2048
	// bytes) matches no rule.
	maxIdentityBytes = 2048
	// maxDNSNames: DNS SANs past this many are not tried.
	maxDNSNames = 32
)

// Identity is what ILB knows of a peer from its verified certificate.
type Identity struct {
	// Name is the SPIFFE ID (the URI SAN of scheme spiffe), else the
	// first DNS SAN, else the subject's common name; bounded for logs
	// and errors.
	Name string
	// Candidates are the names the peer rules are matched against: the
	// SPIFFE ID, else every DNS SAN, else the common name.
	Candidates []string
}

// IdentityOf is the identity a certificate names.
func IdentityOf(leaf *x509.Certificate) Identity {
	var c []string
	for _, u := range leaf.URIs {
		if strings.EqualFold(u.Scheme, "spiffe") {
			c = []string{u.String()}
			break
		}
	}
	if len(c) == 0 {
		c = leaf.DNSNames[:min(len(leaf.DNSNames), maxDNSNames)]
	}
	if len(c) == 0 && leaf.Subject.CommonName != "" {
		c = []string{leaf.Subject.CommonName}
	}
	id := Identity{Name: "(no name)"}
	for _, n := range c {
		if len(n) <= maxIdentityBytes {
			id.Candidates = append(id.Candidates, n)
		}
	}
	if len(c) > 0 {
		id.Name = bound.String(c[0], bound.Name)
	}
	return id
}

// peerInfo is the cached verdict on one certificate.
type peerInfo struct {
	id      Identity
	sources map[string]bool // the sources the rules let it speak for
}

func newPeerInfo(c *config.Config, leaf *x509.Certificate) *peerInfo {
	p := &peerInfo{id: IdentityOf(leaf), sources: map[string]bool{}}
	for _, n := range p.id.Candidates {
		for _, s := range c.SourcesOf(n) {
			p.sources[s] = true
		}
	}
	return p
}

// identityCache maps a leaf certificate (by its DER bytes: the map
// hashes them, and compares them whole) to its verdict, so a stream's
// authorization costs one lock-free lookup in an immutable map; a new
// certificate (once per certificate, not per stream) copies the map.
// Bounded: it starts afresh when full.
type identityCache struct {
	m  atomic.Pointer[certMap]
	mu sync.Mutex // serialises writers
}

type certMap struct {
	m     map[string]*peerInfo
	bytes int // of the keys
}

func (ic *identityCache) get(c *config.Config, leaf *x509.Certificate) *peerInfo {
	if cm := ic.m.Load(); cm != nil {
		if p := cm.m[string(leaf.Raw)]; p != nil {
			return p
		}
	}
	p := newPeerInfo(c, leaf)
	if len(leaf.Raw) > maxCachedBytes {
		return p
	}
	ic.mu.Lock()
	defer ic.mu.Unlock()
	next := &certMap{m: map[string]*peerInfo{}}
	if cm := ic.m.Load(); cm != nil && len(cm.m) < maxCachedCerts && cm.bytes+len(leaf.Raw) <= maxCachedBytes {
		next.m, next.bytes = maps.Clone(cm.m), cm.bytes
	}
	next.m[string(leaf.Raw)] = p
	next.bytes += len(leaf.Raw)
	ic.m.Store(next)
	return p
}

// verifiedLeaf is the leaf certificate of the stream's peer when the TLS
// handshake verified its chain, else nil; addr is the peer's address
// (nil when unknown).
func verifiedLeaf(ctx context.Context) (leaf *x509.Certificate, addr net.Addr) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.PeerCertificates) == 0 {
		return nil, p.Addr
	}
	return info.State.PeerCertificates[0], p.Addr
}

// addrString is addr's text, "" for nil.
func addrString(addr net.Addr) string {
	if addr == nil {
		return ""
	}
	return addr.String()
}
