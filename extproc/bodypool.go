package extproc

import (
	"math/bits"
	"sync"
)

// Full-duplex request bodies ILB holds until their end are read into
// buffers sized from content-length and reused once the body went back to
// Envoy: a 256 KiB body allocated per request doubled the garbage the
// collector had to chase (BenchmarkPickerCPU). Buffers come in power-of-
// two classes from minPooledBody to maxPooledBody; other sizes are
// allocated and left to the collector.
const (
	minPooledBody = 32 << 10
	maxPooledBody = 16 << 20
)

// bodyPools holds a pool per class: 32 KiB, 64 KiB, ... 16 MiB.
var bodyPools [10]sync.Pool

// bodyClass is the pool class of a buffer of capacity n (at least n
// bytes), or -1 when n is not pooled.
func bodyClass(n int) int {
	if n < minPooledBody || n > maxPooledBody {
		return -1
	}
	return bits.Len(uint(n-1)) - bits.Len(minPooledBody-1)
}

// getBody returns an empty buffer of capacity at least n, and the release
// that returns it to its pool (nil when n is not pooled). The caller must
// not touch the buffer, nor anything sliced from it, after release.
func getBody(n int) ([]byte, func()) {
	c := bodyClass(n)
	if c < 0 {
		return make([]byte, 0, n), nil
	}
	p, _ := bodyPools[c].Get().(*[]byte)
	if p == nil {
		b := make([]byte, 0, minPooledBody<<c)
		p = &b
	}
	return (*p)[:0], func() {
		*p = (*p)[:0]
		bodyPools[c].Put(p)
	}
}
