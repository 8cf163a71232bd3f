package stack

import "sync"

// lockedRand makes a generator safe for concurrent use; nil stays nil.
func lockedRand(f func() uint64) func() uint64 {
	if f == nil {
		return nil
	}
	var mu sync.Mutex
	return func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		return f()
	}
}
