package ha

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	kwait "k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
)

// funcStore is a Reflector's store that hands every change to functions:
// set (added or updated), del (deleted) and replace (a whole list, after
// a list or relist).
type funcStore struct {
	set     func(obj any)
	del     func(obj any)
	replace func(list []any)
}

var _ cache.ReflectorStore = (*funcStore)(nil)

func (s *funcStore) Add(obj any) error    { s.set(obj); return nil }
func (s *funcStore) Update(obj any) error { s.set(obj); return nil }
func (s *funcStore) Delete(obj any) error { s.del(obj); return nil }
func (s *funcStore) Replace(list []any, _ string) error {
	s.replace(list)
	return nil
}
func (s *funcStore) Resync() error { return nil }

// watchBackoff spaces a watch's retries: 200 ms doubling to 2 s (as
// Kubernetes discovery's), so a replica catches up within 2 s of an API
// server's return.
var watchBackoff = kwait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 8, Cap: 2 * time.Second}

// runReflector lists and watches lw into st until ctx is done.
func runReflector(ctx context.Context, lw cache.ListerWatcher, example runtime.Object, st cache.ReflectorStore) {
	bo := watchBackoff
	r := cache.NewReflectorWithOptions(lw, example, st, cache.ReflectorOptions{
		Name: "ilb-ha", Backoff: &bo,
	})
	r.RunWithContext(ctx)
}
