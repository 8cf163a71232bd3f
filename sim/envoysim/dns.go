package envoysim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// resolveEndpoints turns the endpoint specs into host addresses: IP
// literals as they are; for DNS clusters each name is resolved with the
// cluster's dns_lookup_family (AUTO: IPv6 if any else IPv4; V4_PREFERRED:
// IPv4 if any else IPv6), STRICT_DNS keeping every address and LOGICAL_DNS
// the first only.
func resolveEndpoints(ctx context.Context, r *net.Resolver, cc *clusterConfig, set *endpointSet) ([]hostSpec, error) {
	if set == nil {
		return nil, nil
	}
	var out []hostSpec
	var errs []error
	for _, ep := range set.endpoints {
		ips, err := resolveHost(ctx, r, ep.address, cc.lookupFamily)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if cc.kind == kindLogicalDNS && len(ips) > 1 {
			ips = ips[:1]
		}
		for _, ip := range ips {
			out = append(out, hostSpec{
				addr:   net.JoinHostPort(ip, strconv.Itoa(int(ep.port))),
				weight: ep.weight,
				health: ep.health,
			})
		}
	}
	return out, errors.Join(errs...)
}

// hostSpec is a resolved endpoint.
type hostSpec struct {
	addr   string
	weight uint32
	health corev3.HealthStatus
}

func resolveHost(ctx context.Context, r *net.Resolver, name string, family clusterv3.Cluster_DnsLookupFamily) ([]string, error) {
	if ip, err := netip.ParseAddr(name); err == nil {
		return []string{ip.String()}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, maxDNSResolutionWaitTime)
	defer cancel()
	addrs, err := r.LookupNetIP(ctx, "ip", name)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", name, err)
	}
	var v4, v6 []string
	for _, a := range addrs {
		a = a.Unmap()
		if a.Is4() {
			v4 = append(v4, a.String())
		} else {
			v6 = append(v6, a.String())
		}
	}
	var out []string
	switch family {
	case clusterv3.Cluster_V4_ONLY:
		out = v4
	case clusterv3.Cluster_V6_ONLY:
		out = v6
	case clusterv3.Cluster_V4_PREFERRED:
		out = v4
		if len(out) == 0 {
			out = v6
		}
	case clusterv3.Cluster_ALL:
		out = slices.Concat(v4, v6)
	default: // AUTO
		out = v6
		if len(out) == 0 {
			out = v4
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("resolve %s: no address of family %s", name, family)
	}
	return out, nil
}

// refreshDNS re-resolves STRICT_DNS and LOGICAL_DNS clusters every
// dns_refresh_rate and rebuilds those whose addresses changed, until ctx is
// done.
func (e *Envoy) refreshDNS(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	last := map[*clusterConfig]time.Time{}
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			return
		case now = <-t.C:
		}
		e.cfgMu.Lock()
		var due []*clusterConfig
		current := map[*clusterConfig]time.Time{}
		for _, cc := range e.state.allClusterConfigs() {
			if cc.kind != kindStrictDNS && cc.kind != kindLogicalDNS {
				continue
			}
			at, ok := last[cc]
			if !ok {
				at = now // resolved when installed
			}
			current[cc] = at
			if now.Sub(at) >= cc.dnsRefresh {
				due = append(due, cc)
			}
		}
		last = current
		e.cfgMu.Unlock()
		for _, cc := range due {
			last[cc] = now
			hosts, err := resolveEndpoints(ctx, e.resolver, cc, cc.endpoints)
			if err != nil {
				e.log.WarnContext(ctx, "dns refresh failed", "cluster", cc.name, "error", err)
				continue
			}
			e.cfgMu.Lock()
			if e.state.clusterConfigFor(cc.name) == cc && !slices.Equal(e.state.dnsHosts[cc.name], hosts) {
				e.state.dnsHosts[cc.name] = hosts
				e.buildClusterLocked(cc)
				e.publishLocked()
			}
			e.cfgMu.Unlock()
		}
	}
}
