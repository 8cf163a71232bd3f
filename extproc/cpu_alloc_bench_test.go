//go:build unix

package extproc_test

import (
	"fmt"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkServerAllocs is BenchmarkServerCPU's world (the same child
// servers, requests and streams) measured in heap allocations instead of
// CPU: what the ILB server and the bare CONTINUE-only floor allocate per
// request, read from each child's runtime/metrics around b.N requests.
// Unlike CPU time it does not depend on what else runs on the machine,
// so it tells whether a change cut the garbage ILB makes per request
// (ilb-B/req, ilb-allocs/req, and the same for the floor) when the
// machine is too busy to compare CPU. The children are not pinned.
//
//	go test -run '^$' -bench ServerAllocs -benchtime 20000x ./extproc/
func BenchmarkServerAllocs(b *testing.B) {
	ilb, floor := startChild(b, childILB), startChild(b, childFloor)
	for _, size := range []int{1 << 10, 256 << 10} {
		body := chatBody(size)
		b.Run(fmt.Sprintf("body=%dKiB", size>>10), func(b *testing.B) {
			const streams = 16
			for _, c := range []*child{ilb, floor} {
				c.drive(b, body, streams, min(b.N, 500)) // warm up
			}
			report := func(c *child, name string) {
				bytes0, objects0 := c.heap(b)
				c.drive(b, body, streams, b.N)
				bytes1, objects1 := c.heap(b)
				b.ReportMetric(float64(bytes1-bytes0)/float64(b.N), name+"-B/req")
				b.ReportMetric(float64(objects1-objects0)/float64(b.N), name+"-allocs/req")
			}
			report(ilb, "ilb")
			report(floor, "floor")
		})
	}
}

// heap asks the child for the bytes and objects it allocated so far.
func (c *child) heap(b *testing.B) (bytes, objects uint64) {
	b.Helper()
	if _, err := fmt.Fprintln(c.in, "heap"); err != nil {
		b.Fatal(err)
	}
	line, err := c.out.ReadString('\n')
	if err != nil {
		b.Fatal(err)
	}
	f := strings.Fields(line)
	if len(f) != 2 {
		b.Fatalf("heap: %q", line)
	}
	if bytes, err = strconv.ParseUint(f[0], 10, 64); err == nil {
		objects, err = strconv.ParseUint(f[1], 10, 64)
	}
	if err != nil {
		b.Fatalf("heap: %q: %v", line, err)
	}
	return bytes, objects
}

// heapAllocs is what this process allocated on the heap so far: bytes
// and objects (runtime/metrics: no stop of the world).
func heapAllocs() (bytes, objects uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/heap/allocs:objects"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}
