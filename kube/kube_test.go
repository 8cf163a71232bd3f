package kube_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/internal/kubetest"
	"github.com/ilbproject/ilb/kube"
	"github.com/ilbproject/ilb/signals"
)

// waitTimeout bounds every wait for a watch event; it is not an SLA
// (latencies are logged and measured by BenchmarkWatchLatency).
const waitTimeout = 60 * time.Second

// discoverer is what the tests drive.
type discoverer interface {
	signals.Watcher
	Run(ctx context.Context)
}

// run starts d's watches for the test's lifetime.
func run(t *testing.T, d discoverer) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// waitTargets waits, on d's change events, until Discover's answer
// satisfies ok, and returns it with the time it took.
func waitTargets(t *testing.T, d discoverer, what string, ok func([]signals.Target, error) bool) ([]signals.Target, time.Duration) {
	t.Helper()
	start := time.Now()
	deadline := time.After(waitTimeout)
	for {
		got, err := d.Discover(context.Background())
		if ok(got, err) {
			return got, time.Since(start)
		}
		select {
		case <-d.Changed():
		case <-deadline:
			t.Fatalf("%s: not seen within %s; last answer %v, %v", what, waitTimeout, got, err)
		}
	}
}

// clientsOf are ILB's clients of api, as the admin.
func clientsOf(t testing.TB, api *kubetest.Server) *kube.Clients {
	t.Helper()
	c, err := kube.NewClients(api.Config())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// states is targets as "address state" strings.
func states(ts []signals.Target) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		s := "serving"
		if t.Draining {
			s = "draining(" + t.Why + ")"
		}
		out[i] = t.Address + " " + s
	}
	return out
}

func is(want ...string) func([]signals.Target, error) bool {
	return func(ts []signals.Target, err error) bool { return err == nil && slices.Equal(states(ts), want) }
}

// endpointSlice is a slice of Service svc with ports http=8000 and
// metrics=9000 and one endpoint per address, all ready, in zone z-<i>.
func endpointSlice(name, svc string, addrs ...string) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("http"), Port: ptr.To[int32](8000)},
			{Name: ptr.To("metrics"), Port: ptr.To[int32](9000)},
		},
	}
	for i, a := range addrs {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{a},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			Zone:       ptr.To(fmt.Sprintf("z-%d", i)),
		})
	}
	return es
}

// TestServiceEndpointSlices follows one Service through its
// EndpointSlices on a real API server: 3 ready endpoints are 3 replicas
// on the named port, a not-ready one drains, a terminating one drains, a
// second slice adds its endpoints, and deleting the slices drains all.
func TestServiceEndpointSlices(t *testing.T) {
	api := kubetest.Start(t)
	cs := api.Client()
	ctx := context.Background()
	api.Namespace(t, "inference")
	api.Service(t, "inference", "vllm")
	api.Service(t, "inference", "other")
	slicesAPI := cs.DiscoveryV1().EndpointSlices("inference")
	es, err := slicesAPI.Create(ctx, endpointSlice("vllm-a", "vllm", "10.0.0.1", "10.0.0.2", "10.0.0.3"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// An unrelated Service's slice is never seen.
	if _, err := slicesAPI.Create(ctx, endpointSlice("other-a", "other", "10.9.9.9"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	d := kube.NewService(clientsOf(t, api), "test", config.KubeDiscovery{Namespace: "inference", Service: "vllm", Port: "http"}, time.Now)
	run(t, d)
	got, _ := waitTargets(t, d, "3 replicas", is("10.0.0.1:8000 serving", "10.0.0.2:8000 serving", "10.0.0.3:8000 serving"))
	if got[2].Zone != "z-2" {
		t.Errorf("zone of %s = %q, want z-2", got[2].Address, got[2].Zone)
	}

	steps := []struct {
		name   string
		change func(es *discoveryv1.EndpointSlice)
		want   []string
	}{
		{"not ready drains", func(es *discoveryv1.EndpointSlice) {
			es.Endpoints[1].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(false), Terminating: ptr.To(false)}
		}, []string{"10.0.0.1:8000 serving", "10.0.0.2:8000 draining(not ready)", "10.0.0.3:8000 serving"}},
		{"ready again serves", func(es *discoveryv1.EndpointSlice) {
			es.Endpoints[1].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(true)}
		}, []string{"10.0.0.1:8000 serving", "10.0.0.2:8000 serving", "10.0.0.3:8000 serving"}},
		{"terminating drains, even while serving", func(es *discoveryv1.EndpointSlice) {
			es.Endpoints[2].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(false), Serving: ptr.To(true), Terminating: ptr.To(true)}
		}, []string{"10.0.0.1:8000 serving", "10.0.0.2:8000 serving", "10.0.0.3:8000 draining(terminating)"}},
		{"gone from the slice", func(es *discoveryv1.EndpointSlice) {
			es.Endpoints = es.Endpoints[:2]
		}, []string{"10.0.0.1:8000 serving", "10.0.0.2:8000 serving"}},
	}
	for _, st := range steps {
		st.change(es)
		if es, err = slicesAPI.Update(ctx, es, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		_, took := waitTargets(t, d, st.name, is(st.want...))
		t.Logf("%s: seen %s after the update", st.name, took)
	}

	// A second slice of the same Service (more than 100 endpoints, or
	// a move between slices: the address in both, ready in one).
	es2 := endpointSlice("vllm-b", "vllm", "10.0.0.2", "10.0.0.4")
	es2.Endpoints[0].Conditions.Ready = ptr.To(false)
	if _, err := slicesAPI.Create(ctx, es2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitTargets(t, d, "two slices", is("10.0.0.1:8000 serving", "10.0.0.2:8000 serving", "10.0.0.4:8000 serving"))

	for _, name := range []string{"vllm-a", "vllm-b"} {
		if err := slicesAPI.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitTargets(t, d, "no slice left", is())

	// The Service itself deleted (or a typo): an error, the replicas held.
	if err := cs.CoreV1().Services("inference").Delete(ctx, "vllm", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitTargets(t, d, "Service deleted", func(_ []signals.Target, err error) bool {
		return err != nil && strings.Contains(err.Error(), "API server test: Service inference/vllm does not exist")
	})
}

// TestServicePortChoice: without a port name, a slice of one port is
// read, one of several is an error naming them; a named port no slice has
// is an error (the last replicas are held); a slice of host names is an
// error.
func TestServicePortChoice(t *testing.T) {
	api := kubetest.Start(t)
	cs := api.Client()
	ctx := context.Background()
	api.Namespace(t, "ns")
	for _, svc := range []string{"svc", "solo", "names"} {
		api.Service(t, "ns", svc)
	}
	if _, err := cs.DiscoveryV1().EndpointSlices("ns").Create(ctx, endpointSlice("two-ports", "svc", "10.0.0.1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	one := endpointSlice("one-port", "solo", "10.0.1.1")
	one.Ports = one.Ports[:1]
	if _, err := cs.DiscoveryV1().EndpointSlices("ns").Create(ctx, one, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	names := endpointSlice("names", "names", "vllm-0.example.com")
	names.AddressType = discoveryv1.AddressTypeFQDN
	if _, err := cs.DiscoveryV1().EndpointSlices("ns").Create(ctx, names, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, svc, port string
		want            []string
		err             string
	}{
		{"host names (FQDN)", "names", "http", nil, "EndpointSlice names lists host names (addressType FQDN): ILB gives Envoy its replicas over EDS, which takes IP addresses"},
		{"only port", "solo", "", []string{"10.0.1.1:8000 serving"}, ""},
		{"named port", "svc", "metrics", []string{"10.0.0.1:9000 serving"}, ""},
		{"named port in no slice: held, not drained", "svc", "grpc", nil, `no EndpointSlice has a port named "grpc" (they have "http"=8000, "metrics"=9000)`},
		{"several ports unnamed", "svc", "", nil, `has ports "http"=8000, "metrics"=9000: name the engines' port in discovery.kubernetes.port`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := kube.NewService(clientsOf(t, api), "test", config.KubeDiscovery{Namespace: "ns", Service: tt.svc, Port: tt.port}, time.Now)
			run(t, d)
			waitTargets(t, d, tt.name, func(ts []signals.Target, err error) bool {
				if tt.err != "" {
					return err != nil && strings.Contains(err.Error(), tt.err)
				}
				return err == nil && slices.Equal(states(ts), tt.want)
			})
		})
	}
}

// TestMain lets the package's tests share nothing but the environment.
func TestMain(m *testing.M) { os.Exit(m.Run()) }

// TestServiceOddSlices: what the API server accepts without checking
// (EndpointSlice zones and port numbers) and what real clusters produce
// (dual-stack slices, non-canonical IPv6, a renamed port) never crash ILB,
// never double-count a replica and never drain on a mistake.
func TestServiceOddSlices(t *testing.T) {
	api := kubetest.Start(t)
	cs := api.Client()
	ctx := context.Background()
	api.Namespace(t, "ns")
	for _, svc := range []string{"zone", "port", "dual", "six", "renamed", "two"} {
		api.Service(t, "ns", svc)
	}
	create := func(es *discoveryv1.EndpointSlice) {
		t.Helper()
		if _, err := cs.DiscoveryV1().EndpointSlices("ns").Create(ctx, es, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	zone := endpointSlice("zone-a", "zone", "10.0.0.1")
	zone.Endpoints[0].Zone = ptr.To("a\nb\tc")
	create(zone)
	port := endpointSlice("port-a", "port", "10.0.0.1")
	port.Ports[0].Port = ptr.To[int32](70000)
	create(port)
	v4 := endpointSlice("dual-v4", "dual", "10.0.0.1")
	v6 := endpointSlice("dual-v6", "dual", "fd00::1")
	v6.AddressType = discoveryv1.AddressTypeIPv6
	create(v4)
	create(v6)
	six := endpointSlice("six-a", "six", "fd00::1")
	six.AddressType = discoveryv1.AddressTypeIPv6
	six2 := endpointSlice("six-b", "six", "fd00::1") // the API server takes canonical IPv6 only (1.37); older ones did not
	six2.AddressType = discoveryv1.AddressTypeIPv6
	create(six)
	create(six2)
	renamed := endpointSlice("renamed-a", "renamed", "10.0.0.1")
	renamed.Ports = renamed.Ports[1:] // only "metrics"
	create(renamed)
	two := endpointSlice("two-a", "two", "10.0.0.1")
	two.Endpoints[0].Addresses = []string{"10.0.0.1", "10.0.0.9"}
	create(two)

	tests := []struct {
		name, svc string
		want      []string
		err       string
	}{
		{"a zone with a newline is dropped, not a crash", "zone", []string{"10.0.0.1:8000 serving"}, ""},
		{"a port out of range is an error", "port", nil, "port 70000 is not a port: want 1..65535"},
		{"dual stack: the IPv4 slices", "dual", []string{"10.0.0.1:8000 serving"}, ""},
		{"one IPv6 address in two slices", "six", []string{"[fd00::1]:8000 serving"}, ""},
		{"the named port in no slice holds", "renamed", nil, `no EndpointSlice has a port named "http" (they have "metrics"=9000)`},
		{"an endpoint's first address only", "two", []string{"10.0.0.1:8000 serving"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := kube.NewService(clientsOf(t, api), "test", config.KubeDiscovery{Namespace: "ns", Service: tt.svc, Port: "http"}, time.Now)
			run(t, d)
			got, _ := waitTargets(t, d, tt.name, func(ts []signals.Target, err error) bool {
				if tt.err != "" {
					return err != nil && strings.Contains(err.Error(), tt.err)
				}
				return err == nil && slices.Equal(states(ts), tt.want)
			})
			for _, g := range got {
				if g.Zone != "" && g.Zone != "z-0" {
					t.Errorf("zone %q kept", g.Zone)
				}
			}
		})
	}
}
