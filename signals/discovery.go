package signals

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ilbproject/ilb/config"
)

// Target is one replica as discovery sees it.
type Target struct {
	// Address is host:port.
	Address string
	// Draining asks for the replica to be drained: it stays known but
	// takes no new traffic.
	Draining bool
}

// Discoverer finds the replicas of one engine cluster. Discover returns
// the full current set; an error means "unknown now" (the monitor keeps
// the last known set). The monitor never calls Discover concurrently with
// itself on one Discoverer.
type Discoverer interface {
	Discover(ctx context.Context) ([]Target, error)
}

// Resolver is the part of *net.Resolver that DNS discovery uses.
type Resolver interface {
	LookupHost(ctx context.Context, host string) ([]string, error)
	LookupSRV(ctx context.Context, service, proto, name string) (string, []*net.SRV, error)
}

var (
	_ Discoverer = (*staticDiscoverer)(nil)
	_ Discoverer = (*dnsDiscoverer)(nil)
	_ Discoverer = (*fileDiscoverer)(nil)
	_ Resolver   = (*net.Resolver)(nil)
)

// newDiscoverer builds the discoverer a cluster's config asks for.
func newDiscoverer(e config.EngineCluster, r Resolver) (Discoverer, error) {
	d := e.Discovery
	switch d.Type {
	case config.DiscoveryStatic, "":
		return &staticDiscoverer{endpoints: slices.Clone(e.Endpoints)}, nil
	case config.DiscoveryDNS:
		return &dnsDiscoverer{resolver: r, name: d.Name, port: d.Port, srv: d.SRV}, nil
	case config.DiscoveryFile:
		return &fileDiscoverer{path: d.File}, nil
	}
	return nil, fmt.Errorf("cluster %s: unknown discovery type %q", e.Name, d.Type)
}

// staticDiscoverer returns the configured endpoints.
type staticDiscoverer struct{ endpoints []string }

// Discover returns the endpoints, none draining.
func (s *staticDiscoverer) Discover(context.Context) ([]Target, error) {
	out := make([]Target, len(s.endpoints))
	for i, a := range s.endpoints {
		out[i] = Target{Address: a}
	}
	return out, nil
}

// dnsDiscoverer resolves A/AAAA records (with a fixed port) or SRV records
// (each target resolved to its addresses, with the record's port). SRV
// priorities and weights are ignored: every record is a replica.
type dnsDiscoverer struct {
	resolver Resolver
	name     string
	port     int
	srv      bool
}

// Discover resolves the name; any lookup error fails the whole discovery,
// so a partial DNS answer never drains healthy replicas.
func (d *dnsDiscoverer) Discover(ctx context.Context) ([]Target, error) {
	var addrs []string
	if d.srv {
		_, recs, err := d.resolver.LookupSRV(ctx, "", "", d.name)
		if err != nil {
			return nil, fmt.Errorf("dns srv %s: %w", d.name, err)
		}
		for _, rec := range recs {
			host := strings.TrimSuffix(rec.Target, ".")
			ips, err := d.lookup(ctx, host)
			if err != nil {
				return nil, fmt.Errorf("dns srv %s: target %s: %w", d.name, host, err)
			}
			for _, ip := range ips {
				addrs = append(addrs, net.JoinHostPort(ip, strconv.Itoa(int(rec.Port))))
			}
		}
	} else {
		ips, err := d.lookup(ctx, d.name)
		if err != nil {
			return nil, fmt.Errorf("dns %s: %w", d.name, err)
		}
		for _, ip := range ips {
			addrs = append(addrs, net.JoinHostPort(ip, strconv.Itoa(d.port)))
		}
	}
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	out := make([]Target, len(addrs))
	for i, a := range addrs {
		out[i] = Target{Address: a}
	}
	return out, nil
}

// lookup returns host's addresses; an IP literal is its own address.
func (d *dnsDiscoverer) lookup(ctx context.Context, host string) ([]string, error) {
	if ip := net.ParseIP(host); ip != nil {
		return []string{ip.String()}, nil
	}
	return d.resolver.LookupHost(ctx, host)
}

// fileDiscoverer reads host:port lines from a file: '#' starts a comment,
// blank lines are ignored, " draining" after the address drains it. The
// file is re-read only when its modification time or size changes.
type fileDiscoverer struct {
	path    string
	modTime time.Time
	size    int64
	targets []Target
	read    bool
}

// Discover returns the file's targets; an unreadable or malformed file is
// an error (the last known targets stay).
func (f *fileDiscoverer) Discover(context.Context) ([]Target, error) {
	st, err := os.Stat(f.path)
	if err != nil {
		return nil, fmt.Errorf("discovery file: %w", err)
	}
	if f.read && st.ModTime().Equal(f.modTime) && st.Size() == f.size {
		return slices.Clone(f.targets), nil
	}
	data, err := os.ReadFile(f.path)
	if err != nil {
		return nil, fmt.Errorf("discovery file: %w", err)
	}
	targets, err := parseTargets(data)
	if err != nil {
		return nil, fmt.Errorf("discovery file %s: %w", f.path, err)
	}
	f.targets, f.modTime, f.size, f.read = targets, st.ModTime(), st.Size(), true
	return slices.Clone(targets), nil
}

// parseTargets reads the file format, reporting every bad line.
func parseTargets(data []byte) ([]Target, error) {
	var out []Target
	var errs []error
	index := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		t := Target{Address: fields[0]}
		if _, port, err := net.SplitHostPort(t.Address); err != nil || port == "" {
			errs = append(errs, fmt.Errorf("line %d: %q is not host:port", n, fields[0]))
			continue
		}
		switch {
		case len(fields) == 2 && fields[1] == "draining":
			t.Draining = true
		case len(fields) > 1:
			errs = append(errs, fmt.Errorf("line %d: unexpected %q after the address (want nothing or \"draining\")", n, strings.Join(fields[1:], " ")))
			continue
		}
		if i, dup := index[t.Address]; dup {
			out[i].Draining = out[i].Draining || t.Draining
			continue
		}
		index[t.Address] = len(out)
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}
