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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/internal/bound"
	"github.com/ilbproject/ilb/signals"
)

// inferencePoolGVR is the resource of the Gateway API Inference
// Extension's InferencePool, v1.
var inferencePoolGVR = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}

// Bounds of an InferencePool's spec that ILB reads: GIE v1 allows 8
// target ports; 64 labels in a selector is far beyond any real one.
const (
	maxPoolPorts  = 8
	maxPoolLabels = 64
)

// Pool finds a cluster's replicas in the Pods of a Gateway API Inference
// Extension InferencePool (inference.networking.k8s.io/v1): the pool is
// watched by name, its Pods by the pool's selector (a new selector starts
// a new Pod watch). A Pod that is Ready with an IP is a replica on each
// of the pool's target ports; one being deleted drains ("pod
// terminating"), and so does one that is not Ready ("pod not ready");
// Pods without an IP, or that have ended, are not replicas. It is a
// [signals.Watcher]; Run runs its watches.
type Pool struct {
	api, ns, name string
	core          rest.Interface
	now           func() time.Time
	changed       chan struct{}
	specChanged   chan struct{}
	pool          *objectWatch[poolSpec]

	mu   sync.Mutex
	pods *objectWatch[pod] // the Pods of selector sel; nil before the pool is seen
	sel  string
}

var _ signals.Watcher = (*Pool)(nil)

// poolSpec is what ILB reads of an InferencePool: its selector (in the
// labels package's string form) and target ports (comma-separated), or
// why it cannot use them.
type poolSpec struct {
	selector, ports, problem string
}

// pod is what ILB keeps of a Pod.
type pod struct {
	ip                     string
	ready, deleting, ended bool
}

// NewPool builds the discoverer of InferencePool ns/name on the API
// server api (its name, for messages).
func NewPool(c *Clients, api string, d config.KubeDiscovery, now func() time.Time) *Pool {
	p := &Pool{
		api: api, ns: d.Namespace, name: d.InferencePool, core: c.Core, now: now,
		changed: make(chan struct{}, 1), specChanged: make(chan struct{}, 1),
	}
	byName := fields.OneTermEqualSelector("metadata.name", d.InferencePool).String()
	res := c.Dynamic.Resource(inferencePoolGVR).Namespace(d.Namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = byName
			return res.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = byName
			return res.Watch(ctx, o)
		},
	}
	what := fmt.Sprintf("API server %s: InferencePool %s/%s", api, d.Namespace, d.InferencePool)
	p.pool = newObjectWatch(what, lw, &unstructured.Unstructured{}, convertPool, func() { signal(p.specChanged) }, now)
	return p
}

// signal sends on a channel of capacity 1 without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Changed delivers after the pool or its Pods changed.
func (p *Pool) Changed() <-chan struct{} { return p.changed }

// Run watches the pool, and its Pods by its current selector, until ctx
// is done.
func (p *Pool) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { p.pool.run(ctx) })
	var stopPods context.CancelFunc = func() {}
	defer func() { stopPods() }()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.specChanged:
		}
		sel, ok := p.selector()
		p.mu.Lock()
		if ok && sel != p.sel {
			stopPods()
			pctx, cancel := context.WithCancel(ctx)
			stopPods = cancel
			what := fmt.Sprintf("API server %s: Pods of InferencePool %s/%s (%s)", p.api, p.ns, p.name, bound.String(sel, bound.Name))
			lw := cache.NewFilteredListWatchFromClient(p.core, "pods", p.ns,
				func(o *metav1.ListOptions) { o.LabelSelector = sel })
			w := newObjectWatch(what, lw, &corev1.Pod{}, convertPod, func() { signal(p.changed) }, p.now)
			p.pods, p.sel = w, sel
			wg.Go(func() { w.run(pctx) })
		}
		p.mu.Unlock()
		signal(p.changed)
	}
}

// selector is the pool's selector, when the pool is listed, present and
// usable.
func (p *Pool) selector() (string, bool) {
	items, err := p.pool.state()
	if err != nil || len(items) != 1 {
		return "", false
	}
	for _, s := range items {
		return s.selector, s.problem == ""
	}
	return "", false
}

// Discover returns the pool's replicas, or an error while the pool or
// its Pods are not listed, the API server does not answer, the pool does
// not exist or its spec is unusable (the monitor then keeps its last
// targets: a pool that disappears is held, not drained, and says so).
func (p *Pool) Discover(context.Context) ([]signals.Target, error) {
	items, err := p.pool.state()
	if err != nil {
		return nil, err
	}
	switch len(items) {
	case 0:
		return nil, fmt.Errorf("API server %s: InferencePool %s/%s does not exist", p.api, p.ns, p.name)
	case 1:
	default: // a field selector by name: the API server cannot give two
		return nil, fmt.Errorf("API server %s: InferencePool %s/%s: %d objects listed by that name", p.api, p.ns, p.name, len(items))
	}
	var spec poolSpec
	for _, s := range items {
		spec = s
	}
	if spec.problem != "" {
		return nil, fmt.Errorf("API server %s: InferencePool %s/%s: %s", p.api, p.ns, p.name, spec.problem)
	}
	p.mu.Lock()
	pods, sel := p.pods, p.sel
	p.mu.Unlock()
	if pods == nil || sel != spec.selector {
		return nil, fmt.Errorf("API server %s: InferencePool %s/%s: watching the Pods of its new selector", p.api, p.ns, p.name)
	}
	podItems, err := pods.state()
	if err != nil {
		return nil, err
	}
	ports := strings.Split(spec.ports, ",")
	byAddr := make(map[string]signals.Target, len(podItems)*len(ports))
	for _, key := range slices.Sorted(maps.Keys(podItems)) {
		pd := podItems[key]
		if pd.ip == "" || pd.ended {
			continue
		}
		why := ""
		switch {
		case pd.deleting:
			why = "pod terminating"
		case !pd.ready:
			why = "pod not ready"
		}
		for _, port := range ports {
			a := net.JoinHostPort(pd.ip, port)
			if old, dup := byAddr[a]; dup && !old.Draining {
				continue // Pods sharing an IP (host network): ready wins
			}
			byAddr[a] = signals.Target{Address: a, Draining: why != "", Why: why}
		}
	}
	targets, err := sortedTargets(byAddr)
	if err != nil {
		return nil, fmt.Errorf("API server %s: InferencePool %s/%s: %w", p.api, p.ns, p.name, err)
	}
	return targets, nil
}

// convertPool reads an InferencePool's selector and target ports.
func convertPool(obj any) (poolSpec, bool) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return poolSpec{}, false
	}
	match, found, err := unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
	switch {
	case err != nil:
		return poolSpec{problem: "spec.selector.matchLabels: " + bound.String(err.Error(), bound.Message)}, true
	case !found || len(match) == 0:
		return poolSpec{problem: "spec.selector.matchLabels is empty: it would select every Pod of the namespace"}, true
	case len(match) > maxPoolLabels:
		return poolSpec{problem: fmt.Sprintf("spec.selector.matchLabels has %d labels: at most %d", len(match), maxPoolLabels)}, true
	}
	for k, v := range match {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return poolSpec{problem: fmt.Sprintf("spec.selector.matchLabels: key %s: %s", bound.Quote(k, bound.Excerpt), errs[0])}, true
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return poolSpec{problem: fmt.Sprintf("spec.selector.matchLabels[%s]: %s", bound.Quote(k, bound.Excerpt), errs[0])}, true
		}
	}
	list, found, err := unstructured.NestedSlice(u.Object, "spec", "targetPorts")
	switch {
	case err != nil:
		return poolSpec{problem: "spec.targetPorts: " + bound.String(err.Error(), bound.Message)}, true
	case !found || len(list) == 0:
		return poolSpec{problem: "spec.targetPorts is empty: want at least one port"}, true
	case len(list) > maxPoolPorts:
		return poolSpec{problem: fmt.Sprintf("spec.targetPorts has %d ports: at most %d", len(list), maxPoolPorts)}, true
	}
	ports := make([]string, 0, len(list))
	for i, item := range list {
		m, _ := item.(map[string]any)
		n, ok, _ := unstructured.NestedInt64(m, "number")
		if !ok || n < 1 || n > 65535 {
			return poolSpec{problem: fmt.Sprintf("spec.targetPorts[%d].number: want a port in 1..65535", i)}, true
		}
		ports = append(ports, strconv.FormatInt(n, 10))
	}
	slices.Sort(ports)
	return poolSpec{selector: labels.SelectorFromSet(match).String(), ports: strings.Join(slices.Compact(ports), ",")}, true
}

// convertPod keeps a Pod's IP and the state ILB maps.
func convertPod(obj any) (pod, bool) {
	po, ok := obj.(*corev1.Pod)
	if !ok {
		return pod{}, false
	}
	out := pod{
		deleting: po.DeletionTimestamp != nil,
		ended:    po.Status.Phase == corev1.PodSucceeded || po.Status.Phase == corev1.PodFailed,
	}
	if ip, err := netip.ParseAddr(po.Status.PodIP); err == nil && ip.Zone() == "" {
		out.ip = ip.Unmap().String()
	}
	for _, c := range po.Status.Conditions {
		if c.Type == corev1.PodReady {
			out.ready = c.Status == corev1.ConditionTrue
		}
	}
	return out, true
}
