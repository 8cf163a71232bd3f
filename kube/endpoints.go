package kube

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/internal/bound"
	"github.com/ilbproject/ilb/signals"
)

// Bounds on what one watch keeps: the endpoints of one slice (the API
// allows 1,000), the ports of one slice (100), and the replicas of one
// cluster, beyond which discovery fails (keeping the last targets) rather
// than grow.
const (
	maxSliceEndpoints = 1000
	maxSlicePorts     = 100
	maxTargets        = 20000
	maxAddress        = 253 + 6 // a DNS name and ":port"
)

// Service finds a cluster's replicas in the EndpointSlices of a Service
// (label kubernetes.io/service-name), watched on one API server. An
// endpoint address that is ready is a replica; one that is terminating
// drains ("terminating"), and so does one that is not ready
// ("not ready"). It is a [signals.Watcher]; Run runs its watch.
type Service struct {
	api, ns, name, port string
	changed             chan struct{}
	w                   *objectWatch[slice]
}

var _ signals.Watcher = (*Service)(nil)

// slice is what ILB keeps of one EndpointSlice: its port (when it has the
// wanted one), its endpoints, or why it cannot use it. Comparable, so an
// update that changes none of it is no change.
type slice struct {
	port      int32
	endpoints string // encoded endpoints, see encodeEndpoints
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
	return s
}

// Run watches until ctx is done.
func (s *Service) Run(ctx context.Context) { s.w.run(ctx) }

// Changed delivers after the watched slices changed.
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
	if es.AddressType == discoveryv1.AddressTypeFQDN {
		return slice{problem: fmt.Sprintf("EndpointSlice %s lists host names (addressType FQDN): ILB gives Envoy its replicas over EDS, which takes IP addresses", bound.String(es.Name, bound.Name))}, true
	}
	port, problem := s.pickPort(es)
	switch {
	case problem != "":
		return slice{problem: problem}, true
	case port == 0: // no replica in it for this port
		return slice{}, true
	}
	if len(es.Endpoints) > maxSliceEndpoints {
		return slice{problem: fmt.Sprintf("EndpointSlice %s has %d endpoints: at most %d are read", bound.String(es.Name, bound.Name), len(es.Endpoints), maxSliceEndpoints)}, true
	}
	return slice{port: port, endpoints: encodeEndpoints(es)}, true
}

// pickPort finds the slice's port: the one named s.port, or its only one.
// A slice without the named port lists no replica (Kubernetes makes one
// slice per set of ports), which is not a problem.
func (s *Service) pickPort(es *discoveryv1.EndpointSlice) (int32, string) {
	if len(es.Ports) > maxSlicePorts {
		return 0, fmt.Sprintf("EndpointSlice %s has %d ports: at most %d are read", bound.String(es.Name, bound.Name), len(es.Ports), maxSlicePorts)
	}
	var names []string
	for _, p := range es.Ports {
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		if p.Port == nil { // all ports: a headless Service without ports
			names = append(names, strconv.Quote(name)+" (no number)")
			continue
		}
		if s.port != "" && name == s.port {
			return *p.Port, ""
		}
		names = append(names, strconv.Quote(name)+"="+strconv.Itoa(int(*p.Port)))
	}
	switch {
	case s.port != "":
		return 0, "" // another port set's slice
	case len(es.Ports) == 1 && es.Ports[0].Port != nil:
		return *es.Ports[0].Port, ""
	case len(es.Ports) == 0 && len(es.Endpoints) == 0:
		return 0, "" // an empty slice: no replica
	}
	return 0, fmt.Sprintf("EndpointSlice %s has ports %s: name the engines' port in discovery.kubernetes.port",
		bound.String(es.Name, bound.Name), bound.String(strings.Join(names, ", "), bound.Message))
}

// Endpoint encoding: one line per address, "address\tstate\tzone", state
// being "" (ready), "terminating" or "not ready". A string keeps the slice
// comparable and costs one allocation.
func encodeEndpoints(es *discoveryv1.EndpointSlice) string {
	var b strings.Builder
	for _, ep := range es.Endpoints {
		state := ""
		c := ep.Conditions
		switch {
		case c.Terminating != nil && *c.Terminating:
			state = "terminating"
		case c.Ready != nil && !*c.Ready: // nil means ready (the API's rule)
			state = "not ready"
		}
		zone := ""
		if ep.Zone != nil {
			zone = bound.String(*ep.Zone, 63)
		}
		for _, a := range ep.Addresses {
			if len(a) > 253 || strings.ContainsAny(a, "\t\n") {
				continue
			}
			fmt.Fprintf(&b, "%s\t%s\t%s\n", a, state, zone)
		}
	}
	return b.String()
}

// Discover returns the replicas of the last known slices, or an error
// while the watch has not listed or its API server does not answer (the
// monitor then keeps its last targets).
func (s *Service) Discover(context.Context) ([]signals.Target, error) {
	items, err := s.w.state()
	if err != nil {
		return nil, err
	}
	byAddr := map[string]signals.Target{}
	var problems []string
	for _, key := range slices.Sorted(maps.Keys(items)) {
		sl := items[key]
		if sl.problem != "" {
			problems = append(problems, sl.problem)
			continue
		}
		for line := range strings.Lines(sl.endpoints) {
			f := strings.Split(strings.TrimSuffix(line, "\n"), "\t")
			t := signals.Target{Address: net.JoinHostPort(f[0], strconv.Itoa(int(sl.port))), Zone: f[2], Why: f[1], Draining: f[1] != ""}
			if old, dup := byAddr[t.Address]; dup && !old.Draining {
				continue // an address in two slices (a move between slices): ready wins
			}
			byAddr[t.Address] = t
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("API server %s: Service %s/%s: %s", s.api, s.ns, s.name, strings.Join(problems, "; "))
	}
	return sortedTargets(byAddr)
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
