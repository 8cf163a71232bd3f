package kube_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/internal/kubetest"
	"github.com/ilbproject/ilb/kube"
)

// BenchmarkUnrelatedObjects measures what 10,000 Pods and 10,000
// EndpointSlices that ILB does not route to, in the namespace it watches,
// cost it: the heap in use once a Service discoverer and an
// InferencePool discoverer (over 3 Pods and 1 slice of their own) have
// listed, minus the heap before they started (heap-bytes/op, after a
// GC). The API server filters by selector, so none of the 20,000 objects
// reaches ILB; the goal is at most 10 MiB.
//
//	ILB_REQUIRE_KUBE=1 go test ./kube -run '^$' -bench UnrelatedObjects -benchtime 3x
func BenchmarkUnrelatedObjects(b *testing.B) {
	api := kubetest.Start(b)
	cs := api.Client()
	ctx := context.Background()
	api.InstallInferencePool(b)
	api.Namespace(b, "inference")
	api.Service(b, "inference", "vllm")
	const unrelated = 10000
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	work := make(chan int)
	for range 32 {
		wg.Go(func() {
			for i := range work {
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("other-%d", i), Labels: map[string]string{"app": "other"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox", Command: []string{"sleep", "infinity"}}}},
				}
				if _, err := cs.CoreV1().Pods("inference").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
				if _, err := cs.DiscoveryV1().EndpointSlices("inference").Create(ctx, endpointSlice(fmt.Sprintf("other-%d", i), fmt.Sprintf("other-%d", i%100), "10.200.0.1"), metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	start := time.Now()
	for i := range unrelated {
		select {
		case work <- i:
		case err := <-errs:
			b.Fatal(err)
		}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	b.Logf("%d Pods and %d EndpointSlices written in %s", unrelated, unrelated, time.Since(start).Round(time.Second))
	for i := range 3 {
		kubetest.RunningPod(b, cs, "inference", fmt.Sprintf("llama-%d", i), "llama", fmt.Sprintf("10.1.0.%d", i+1), true)
	}
	api.ApplyPool(b, "inference", "llama-pool", "llama", 8000)
	if _, err := cs.DiscoveryV1().EndpointSlices("inference").Create(ctx, endpointSlice("vllm-a", "vllm", "10.0.0.1"), metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var delta float64
	for range b.N {
		before := heapInUse()
		svc := kube.NewService(clientsOf(b, api), "test", config.KubeDiscovery{Namespace: "inference", Service: "vllm", Port: "http"}, time.Now)
		pool := kube.NewPool(clientsOf(b, api), "test", config.KubeDiscovery{Namespace: "inference", InferencePool: "llama-pool"}, time.Now)
		rctx, cancel := context.WithCancel(ctx)
		var runs sync.WaitGroup
		runs.Go(func() { svc.Run(rctx) })
		runs.Go(func() { pool.Run(rctx) })
		for _, d := range []discoverer{svc, pool} {
			for {
				ts, err := d.Discover(ctx)
				if err == nil && len(ts) > 0 {
					break
				}
				select {
				case <-d.Changed():
				case <-time.After(waitTimeout):
					b.Fatalf("not listed: %v", err)
				}
			}
		}
		delta += float64(heapInUse()) - float64(before)
		runtime.KeepAlive(svc)
		runtime.KeepAlive(pool)
		cancel()
		runs.Wait()
	}
	b.ReportMetric(delta/float64(b.N), "heap-bytes/op")
}

// heapInUse is the heap in use after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// BenchmarkWatchLatency measures the time from an EndpointSlice update
// returning from the real API server to ILB's Service discoverer showing
// it (an endpoint flipped between ready and not ready, one update per
// op): ns/op is that latency. ILB's signals monitor rediscovers at the
// discoverer's change event; the goal is well under 1 s.
//
//	ILB_REQUIRE_KUBE=1 go test ./kube -run '^$' -bench WatchLatency -benchtime 200x
func BenchmarkWatchLatency(b *testing.B) {
	api := kubetest.Start(b)
	cs := api.Client()
	ctx := context.Background()
	api.Namespace(b, "inference")
	api.Service(b, "inference", "vllm")
	es, err := cs.DiscoveryV1().EndpointSlices("inference").Create(ctx, endpointSlice("vllm-a", "vllm", "10.0.0.1", "10.0.0.2"), metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	d := kube.NewService(clientsOf(b, api), "test", config.KubeDiscovery{Namespace: "inference", Service: "vllm", Port: "http"}, time.Now)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { d.Run(rctx); close(done) }()
	defer func() { cancel(); <-done }()
	draining := func() (bool, error) {
		ts, err := d.Discover(ctx)
		if err != nil || len(ts) != 2 {
			return false, err
		}
		return ts[1].Draining, nil
	}
	for {
		if _, err := draining(); err == nil {
			break
		}
		<-d.Changed()
	}
	var total time.Duration
	b.ResetTimer()
	for i := range b.N {
		want := i%2 == 0 // not ready on even ops
		es.Endpoints[1].Conditions.Ready = ptr.To(!want)
		if es, err = cs.DiscoveryV1().EndpointSlices("inference").Update(ctx, es, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for {
			if got, _ := draining(); got == want {
				break
			}
			select {
			case <-d.Changed():
			case <-time.After(waitTimeout):
				b.Fatalf("op %d: not seen", i)
			}
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "ns-after-update/op")
}
