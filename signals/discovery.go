package signals

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
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
	// Why says why it drains (e.g. "terminating", "not ready"), at most a
	// few dozen bytes; "" for a plain drain. The replica's reason is then
	// "discovery: " + Why.
	Why string
	// Zone is the replica's zone when discovery knows it (a Kubernetes
	// EndpointSlice's zone); "" otherwise. Shown, not yet acted on.
	Zone string
}

// Discoverer finds the replicas of one engine cluster. Discover returns
// the full current set; an error means "unknown now" (the monitor keeps
// the last known set). The monitor never calls Discover concurrently with
// itself on one Discoverer.
type Discoverer interface {
	Discover(ctx context.Context) ([]Target, error)
}

// Watcher is a Discoverer that knows when its targets change (a
// Kubernetes watch): the monitor runs Discover again as soon as Changed
// delivers, rather than at the next refresh. Changed returns the same
// channel every time; a send on it may stand for many changes.
type Watcher interface {
	Discoverer
	Changed() <-chan struct{}
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

// newDiscoverer builds the discoverer a cluster's config asks for;
// given (Options.Discoverers) is used for the types the monitor cannot
// build itself (kubernetes).
func newDiscoverer(e config.EngineCluster, r Resolver, given map[string]Discoverer) (Discoverer, error) {
	if g, ok := given[e.Name]; ok && g != nil {
		return g, nil
	}
	d := e.Discovery
	switch d.Type {
	case config.DiscoveryKube:
		return nil, fmt.Errorf("cluster %s: kubernetes discovery needs a discoverer from package kube (Options.Discoverers)", e.Name)
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
//
// A file that is empty or only whitespace is an error, not an empty
// fleet: that is what a file being rewritten in place (truncated, then
// written) looks like, and what a lost volume or a failed template gives.
// An explicit empty list is a file with a comment line and no address:
// it drains every replica.
type fileDiscoverer struct {
	path    string
	modTime time.Time
	size    int64
	targets []Target
	read    bool
}

// maxDiscoveryFile bounds the size of a discovery file (about 700,000
// addresses): a larger one is an error, never a large read.
const maxDiscoveryFile = 16 << 20

// Discover returns the file's targets; an unreadable, empty (or only
// whitespace), oversized or malformed file is an error (the last known
// targets stay).
func (f *fileDiscoverer) Discover(context.Context) ([]Target, error) {
	st, err := os.Stat(f.path)
	if err != nil {
		return nil, fmt.Errorf("discovery file: %w", err)
	}
	if f.read && st.ModTime().Equal(f.modTime) && st.Size() == f.size {
		return slices.Clone(f.targets), nil
	}
	if st.Size() > maxDiscoveryFile {
		return nil, fmt.Errorf("discovery file %s: %d bytes, over the %d-byte limit", f.path, st.Size(), maxDiscoveryFile)
	}
	data, err := readBounded(f.path, maxDiscoveryFile)
	if err != nil {
		return nil, fmt.Errorf("discovery file %s: %w", f.path, err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		what := "empty (0 bytes)"
		if len(data) > 0 {
			what = fmt.Sprintf("only whitespace (%d bytes)", len(data))
		}
		return nil, fmt.Errorf("discovery file %s is %s: want host:port lines, or a comment line such as \"# no replicas\" to drain every replica on purpose", f.path, what)
	}
	targets, err := parseTargets(data)
	if err != nil {
		return nil, fmt.Errorf("discovery file %s: %w", f.path, err)
	}
	f.targets, f.modTime, f.size, f.read = targets, st.ModTime(), st.Size(), true
	return slices.Clone(targets), nil
}

// readBounded reads at most limit bytes of the file at path; a longer
// file (it grew since its stat) is an error.
func readBounded(path string, limit int64) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("over the %d-byte limit", limit)
	}
	return data, nil
}

// maxLineErrors is how many bad lines a discovery error names; the rest
// are counted. maxQuoted bounds the part of a bad line quoted.
// maxAddress bounds an address (a DNS name is at most 253 bytes).
const (
	maxLineErrors = 5
	maxQuoted     = 64
	maxAddress    = 300
)

// quoteBounded quotes s, at most maxQuoted bytes of it.
func quoteBounded(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:maxQuoted], len(s))
}

// parseTargets reads the file format, reporting the first bad lines
// (maxLineErrors, each quoted up to maxQuoted bytes) and how many more.
func parseTargets(data []byte) ([]Target, error) {
	var out []Target
	var errs []error
	bad := 0
	fail := func(err error) {
		if bad++; bad <= maxLineErrors {
			errs = append(errs, err)
		}
	}
	index := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, maxDiscoveryFile)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		t := Target{Address: fields[0]}
		if len(t.Address) > maxAddress {
			fail(fmt.Errorf("line %d: address %s is longer than %d bytes", n, quoteBounded(t.Address), maxAddress))
			continue
		}
		if _, port, err := net.SplitHostPort(t.Address); err != nil || port == "" {
			fail(fmt.Errorf("line %d: %s is not host:port", n, quoteBounded(fields[0])))
			continue
		}
		switch {
		case len(fields) == 2 && fields[1] == "draining":
			t.Draining = true
		case len(fields) > 1:
			fail(fmt.Errorf("line %d: unexpected %s after the address (want nothing or \"draining\")", n, quoteBounded(strings.Join(fields[1:], " "))))
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
	if bad > maxLineErrors {
		errs = append(errs, fmt.Errorf("and %d more bad lines", bad-maxLineErrors))
	}
	return out, errors.Join(errs...)
}
