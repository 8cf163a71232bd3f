package kube

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/internal/bound"
	"github.com/ilbproject/ilb/signals"
)

// Bounds on what one watch keeps: the endpoints of one slice (the API
// allows 1,000), the ports of one slice (real ones have a handful), and
// the replicas of one cluster, beyond which discovery fails (keeping the
// last targets) rather than grow.
const (
	maxSliceEndpoints = 1000
	maxSlicePorts     = 100
	maxTargets        = 20000
	maxAddress        = 253 + 6 // a DNS name and ":port"
)

// Service finds a cluster's replicas in the EndpointSlices of a Service
// (label kubernetes.io/service-name), watched on one API server with the
// Service object itself (by name: whether it exists). An endpoint address
// that is ready is a replica; one that is terminating drains
// ("terminating"), and so does one that is not ready ("not ready"). It
// is a [signals.Watcher]; Run runs its watches.
type Service struct {
	api, ns, name, port string
	changed             chan struct{}
	w                   *objectWatch[slice]
	svc                 *objectWatch[bool] // the Service object itself, by name
}

var _ signals.Watcher = (*Service)(nil)

// slice is what ILB keeps of one EndpointSlice: its address family, the
// port (0 when it lacks the wanted one), its port names (for the error
// when no slice has the wanted one), its endpoints, or why it cannot use
// it. Comparable, so an update that changes none of it is no change.
type slice struct {
	family    discoveryv1.AddressType
	port      int32
	ports     string
	endpoints string // encoded, see encodeEndpoints
	listed    int    // endpoints encoded
	problem   string
}

// NewService builds the discoverer of Service ns/name's EndpointSlices on
// the API server api (its name, for messages), reading port (a port name;
// "" for the slices' only port).
func NewService(c *Clients, api string, d config.KubeDiscovery, now func() time.Time) *Service {
	s := &Service{api: api, ns: d.Namespace, name: d.Service, port: d.Port, changed: make(chan struct{}, 1)}
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: d.Service}).String()
	lw := cache.NewFilteredListWatchFromClient(c.Discovery, "endpointslices", d.Namespace,
		func(o *metav1.ListOptions) { o.LabelSelector = sel })
	what := fmt.Sprintf("API server %s: EndpointSlices of Service %s/%s", api, d.Namespace, d.Service)
	s.w = newObjectWatch(what, lw, &discoveryv1.EndpointSlice{}, s.convert, s.notify, now)
	byName := fields.OneTermEqualSelector("metadata.name", d.Service).String()
	svcLW := cache.NewFilteredListWatchFromClient(c.Core, "services", d.Namespace,
		func(o *metav1.ListOptions) { o.FieldSelector = byName })
	s.svc = newObjectWatch(fmt.Sprintf("API server %s: Service %s/%s", api, d.Namespace, d.Service),
		svcLW, &corev1.Service{}, func(any) (bool, bool) { return true, true }, s.notify, now)
	return s
}

// Run watches the Service and its slices until ctx is done.
func (s *Service) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { s.svc.run(ctx) })
	s.w.run(ctx)
	wg.Wait()
}

// Changed delivers after the Service or its slices changed.
func (s *Service) Changed() <-chan struct{} { return s.changed }

func (s *Service) notify() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// convert keeps what ILB needs of an EndpointSlice.
func (s *Service) convert(obj any) (slice, bool) {
	es, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return slice{}, false
	}
	name := bound.String(es.Name, bound.Name)
	switch {
	case es.AddressType == discoveryv1.AddressTypeFQDN:
		return slice{problem: fmt.Sprintf("EndpointSlice %s lists host names (addressType FQDN): ILB gives Envoy its replicas over EDS, which takes IP addresses", name)}, true
	case es.AddressType != discoveryv1.AddressTypeIPv4 && es.AddressType != discoveryv1.AddressTypeIPv6:
		return slice{problem: fmt.Sprintf("EndpointSlice %s has addressType %s: want IPv4 or IPv6", name, bound.Quote(string(es.AddressType), bound.Excerpt))}, true
	case len(es.Endpoints) > maxSliceEndpoints:
		return slice{problem: fmt.Sprintf("EndpointSlice %s has %d endpoints: at most %d are read", name, len(es.Endpoints), maxSliceEndpoints)}, true
	}
	port, ports, problem := s.pickPort(es)
	if problem != "" {
		return slice{problem: problem}, true
	}
	out := slice{family: es.AddressType, port: port, ports: ports}
	if port != 0 {
		out.endpoints, out.listed = encodeEndpoints(es)
	} else {
		out.listed = len(es.Endpoints)
	}
	return out, true
}

// pickPort finds the slice's port: the one named s.port, or its only one
// (0 when the slice has no endpoint, or lacks the named port: Kubernetes
// makes one slice per set of ports), the slice's ports as text, or why it
// cannot choose. The API server does not check EndpointSlice port
// numbers: one outside 1..65535 is a problem.
func (s *Service) pickPort(es *discoveryv1.EndpointSlice) (int32, string, string) {
	name := bound.String(es.Name, bound.Name)
	if len(es.Ports) > maxSlicePorts {
		return 0, "", fmt.Sprintf("EndpointSlice %s has %d ports: at most %d are read", name, len(es.Ports), maxSlicePorts)
	}
	var names []string
	var chosen *discoveryv1.EndpointPort
	for i, p := range es.Ports {
		pn := ""
		if p.Name != nil {
			pn = bound.String(*p.Name, 63)
		}
		if p.Port == nil { // all ports: a headless Service without ports
			names = append(names, strconv.Quote(pn)+" (no number)")
		} else {
			names = append(names, strconv.Quote(pn)+"="+strconv.Itoa(int(*p.Port)))
		}
		if (s.port != "" && pn == s.port) || (s.port == "" && len(es.Ports) == 1) {
			chosen = &es.Ports[i]
		}
	}
	ports := strings.Join(names, ", ")
	switch {
	case chosen == nil && (s.port != "" || len(es.Endpoints) == 0):
		return 0, ports, ""
	case chosen == nil:
		return 0, "", fmt.Sprintf("EndpointSlice %s has ports %s: name the engines' port in discovery.kubernetes.port", name, bound.String(ports, bound.Message))
	case chosen.Port == nil:
		return 0, "", fmt.Sprintf("EndpointSlice %s: port %s has no number", name, bound.String(ports, bound.Message))
	case *chosen.Port < 1 || *chosen.Port > 65535:
		return 0, "", fmt.Sprintf("EndpointSlice %s: port %d is not a port: want 1..65535", name, *chosen.Port)
	}
	return *chosen.Port, ports, ""
}

// encodeEndpoints encodes the slice's endpoints, one line each,
// "address\tstate\tzone": the endpoint's first address (the API's rule:
// its addresses are fungible; kube-proxy uses the first), parsed and in
// canonical form, state "" (ready), "terminating" or "not ready", and its
// zone when it is a valid label value (the API server does not check it:
// a tab or newline would break the encoding). Endpoints whose address is
// not an IP of the slice's family are left out. A string keeps the slice
// comparable and costs one allocation.
func encodeEndpoints(es *discoveryv1.EndpointSlice) (string, int) {
	var b strings.Builder
	n := 0
	for _, ep := range es.Endpoints {
		if len(ep.Addresses) == 0 {
			continue
		}
		ip, err := netip.ParseAddr(ep.Addresses[0])
		if err != nil || ip.Zone() != "" || (ip.Unmap().Is4() != (es.AddressType == discoveryv1.AddressTypeIPv4)) {
			continue
		}
		state := ""
		c := ep.Conditions
		switch {
		case c.Terminating != nil && *c.Terminating:
			state = "terminating"
		case c.Ready != nil && !*c.Ready: // nil means ready (the API's rule)
			state = "not ready"
		}
		zone := ""
		if ep.Zone != nil && len(validation.IsValidLabelValue(*ep.Zone)) == 0 {
			zone = *ep.Zone
		}
		fmt.Fprintf(&b, "%s\t%s\t%s\n", ip.Unmap().String(), state, zone)
		n++
	}
	return b.String(), n
}

// maxProblems is how many problems of single slices an error names.
const maxProblems = 3

// Discover returns the replicas of the last known slices, or an error
// while a watch has not listed or its API server does not answer, while
// the Service does not exist (a typo, or deleted: a Service with no slice
// has no replica, one that is gone is not known to have none), while a
// slice is unusable, or when slices list endpoints but none has the named
// port (a renamed port, a typo): the monitor then keeps its last targets
// rather than drain them. A dual-stack Service has a slice per family:
// the IPv4 ones are read when there are any, else the IPv6 ones.
func (s *Service) Discover(context.Context) ([]signals.Target, error) {
	svc, err := s.svc.state()
	if err != nil {
		return nil, err
	}
	if len(svc) == 0 {
		return nil, fmt.Errorf("API server %s: Service %s/%s does not exist", s.api, s.ns, s.name)
	}
	items, err := s.w.state()
	if err != nil {
		return nil, err
	}
	var problems []string
	family := discoveryv1.AddressTypeIPv6
	for _, sl := range items {
		if sl.problem != "" {
			problems = append(problems, sl.problem)
		}
		if sl.family == discoveryv1.AddressTypeIPv4 && sl.listed > 0 {
			family = discoveryv1.AddressTypeIPv4
		}
	}
	if len(problems) > 0 {
		slices.Sort(problems)
		if len(problems) > maxProblems {
			problems = append(problems[:maxProblems], fmt.Sprintf("and %d more", len(problems)-maxProblems))
		}
		return nil, fmt.Errorf("API server %s: Service %s/%s: %s", s.api, s.ns, s.name, bound.String(strings.Join(problems, "; "), bound.Message))
	}
	byAddr := map[string]signals.Target{}
	withPort, withEndpoints, seen := 0, 0, ""
	for _, key := range slices.Sorted(maps.Keys(items)) {
		sl := items[key]
		if sl.family != family {
			continue
		}
		if sl.listed > 0 {
			withEndpoints++
			seen = sl.ports
		}
		if sl.port == 0 {
			continue
		}
		withPort++
		for line := range strings.Lines(sl.endpoints) {
			f := strings.SplitN(strings.TrimSuffix(line, "\n"), "\t", 3)
			if len(f) != 3 {
				continue
			}
			t := signals.Target{Address: net.JoinHostPort(f[0], strconv.Itoa(int(sl.port))), Zone: f[2], Why: f[1], Draining: f[1] != ""}
			if old, dup := byAddr[t.Address]; dup && !old.Draining {
				continue // an address in two slices (a move between slices): ready wins
			}
			byAddr[t.Address] = t
		}
	}
	if s.port != "" && withPort == 0 && withEndpoints > 0 {
		return nil, fmt.Errorf("API server %s: Service %s/%s: no EndpointSlice has a port named %q (they have %s)", s.api, s.ns, s.name, s.port, bound.String(seen, bound.Message))
	}
	targets, err := sortedTargets(byAddr)
	if err != nil {
		return nil, fmt.Errorf("API server %s: Service %s/%s: %w", s.api, s.ns, s.name, err)
	}
	return targets, nil
}

// sortedTargets returns the targets in address order, or an error past
// maxTargets.
func sortedTargets(byAddr map[string]signals.Target) ([]signals.Target, error) {
	if len(byAddr) > maxTargets {
		return nil, fmt.Errorf("%d replicas: at most %d per cluster", len(byAddr), maxTargets)
	}
	out := make([]signals.Target, 0, len(byAddr))
	for _, a := range slices.Sorted(maps.Keys(byAddr)) {
		if len(a) <= maxAddress {
			out = append(out, byAddr[a])
		}
	}
	return out, nil
}
