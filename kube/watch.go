package kube

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/ilbproject/ilb/internal/bound"
)

// Backoff of a watch's list and watch retries: 200 ms, doubling to 2 s.
// client-go's default grows to 30 s (with jitter up to 60 s), which would
// leave ILB that long behind an API server that came back; a retry every
// 2 s of one selective list per watched object is light for the server.
var retryBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 8, Cap: 2 * time.Second}

// maxErrorBytes bounds an API server's error kept for display.
const maxErrorBytes = 256

// objectWatch keeps what conv makes of the objects of one list and watch
// (one resource, one namespace, one selector) through a client-go
// Reflector, and knows whether the API server answers it: its last list
// or watch call failed (stale) or not, since when, and whether it has
// listed once (synced). Safe for concurrent use.
type objectWatch[T comparable] struct {
	what     string // e.g. "EndpointSlices of Service inference/vllm"
	lw       *trackedLW
	example  runtime.Object
	conv     func(obj any) (T, bool)
	onChange func()
	now      func() time.Time

	mu       sync.Mutex
	items    map[string]T
	synced   bool
	err      string
	errSince time.Time
}

// newObjectWatch builds a watch; run it with run. conv returns false for
// an object to leave out.
func newObjectWatch[T comparable](what string, lw cache.ListerWatcherWithContext, example runtime.Object, conv func(any) (T, bool), onChange func(), now func() time.Time) *objectWatch[T] {
	w := &objectWatch[T]{what: what, example: example, conv: conv, onChange: onChange, now: now, items: map[string]T{}}
	w.lw = &trackedLW{inner: lw, note: w.note}
	return w
}

// run lists and watches until ctx is done, relisting when the watch
// expires or fails (Reflector), with retryBackoff between failures.
func (w *objectWatch[T]) run(ctx context.Context) {
	b := retryBackoff
	r := cache.NewReflectorWithOptions(w.lw, w.example, (*reflectorStore[T])(w), cache.ReflectorOptions{
		Name: w.what, TypeDescription: w.what, Backoff: &b,
	})
	r.RunWithContext(ctx)
}

// note records the result of a list or watch call, and reports a change
// when the watch turns stale or answers again (Discover's answer changes).
// An expired resource version (the Reflector lists again at once) and a
// request to slow down (it retries) are the API server answering: they
// change nothing.
func (w *objectWatch[T]) note(err error) {
	if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || apierrors.IsTooManyRequests(err) {
		return
	}
	w.mu.Lock()
	was := w.err != ""
	if err == nil {
		w.err, w.errSince = "", time.Time{}
	} else {
		if !was {
			w.errSince = w.now()
		}
		w.err = bound.String(err.Error(), maxErrorBytes)
	}
	flipped := was != (err != nil)
	w.mu.Unlock()
	if flipped {
		w.onChange()
	}
}

// state returns a copy of the items, or an error when the watch has not
// listed yet or its API server does not answer.
func (w *objectWatch[T]) state() (map[string]T, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.err != "":
		return nil, fmt.Errorf("%s: the API server does not answer since %s: %s", w.what, w.errSince.UTC().Format(time.RFC3339), w.err)
	case !w.synced:
		return nil, fmt.Errorf("%s: not listed yet", w.what)
	}
	out := make(map[string]T, len(w.items))
	for k, v := range w.items {
		out[k] = v
	}
	return out, nil
}

// set stores v under obj's key (or removes it when conv leaves it out)
// and reports a change.
func (w *objectWatch[T]) set(obj any) error {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return err
	}
	v, keep := w.conv(obj)
	w.mu.Lock()
	old, had := w.items[key]
	switch {
	case keep && (!had || old != v):
		w.items[key] = v
	case !keep && had:
		delete(w.items, key)
	default:
		w.mu.Unlock()
		return nil
	}
	w.mu.Unlock()
	w.onChange()
	return nil
}

// reflectorStore is an objectWatch seen as the Reflector's store.
type reflectorStore[T comparable] objectWatch[T]

var _ cache.ReflectorStore = (*reflectorStore[int])(nil)

// Add and Update keep what conv makes of obj; Resync does nothing (no
// resync period is set).
func (s *reflectorStore[T]) Add(obj any) error    { return (*objectWatch[T])(s).set(obj) }
func (s *reflectorStore[T]) Update(obj any) error { return (*objectWatch[T])(s).set(obj) }
func (s *reflectorStore[T]) Resync() error        { return nil }

// Delete removes obj's item.
func (s *reflectorStore[T]) Delete(obj any) error {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	_, had := s.items[key]
	delete(s.items, key)
	s.mu.Unlock()
	if had {
		s.onChange()
	}
	return nil
}

// Replace puts a whole list in place (a list or relist): the watch is
// synced from then on.
func (s *reflectorStore[T]) Replace(list []any, _ string) error {
	items := make(map[string]T, len(list))
	for _, obj := range list {
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if err != nil {
			return err
		}
		if v, keep := s.conv(obj); keep {
			items[key] = v
		}
	}
	s.mu.Lock()
	s.items, s.synced = items, true
	s.mu.Unlock()
	s.onChange()
	return nil
}

// trackedLW passes list and watch calls on and notes whether they worked.
// A watch that ends (its stream closed by a server that went away) makes
// the Reflector call Watch or List again: that call's failure is what
// marks the watch stale, its success what clears it.
type trackedLW struct {
	inner cache.ListerWatcherWithContext
	note  func(error)
}

func (t *trackedLW) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	obj, err := t.inner.ListWithContext(ctx, o)
	if ctx.Err() == nil {
		t.note(err)
	}
	return obj, err
}

func (t *trackedLW) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	w, err := t.inner.WatchWithContext(ctx, o)
	if ctx.Err() == nil {
		t.note(err)
	}
	return w, err
}

// List and Watch are the context-free forms the Reflector's constructor
// asks for; it calls the WithContext forms.
func (t *trackedLW) List(o metav1.ListOptions) (runtime.Object, error) {
	return t.ListWithContext(context.Background(), o)
}

func (t *trackedLW) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return t.WatchWithContext(context.Background(), o)
}
