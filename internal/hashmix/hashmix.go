// Package hashmix combines 64-bit hashes: the chained block hashes of
// replica picking (package picker) and of the simulated workloads' prompt
// prefixes (sim/workload) use the same combine.
package hashmix

// Mix combines a hash h with a value v: splitmix64's finaliser over a
// boost-style combine, so the result is well spread and not symmetric in
// h and v (Mix(a, b) != Mix(b, a) in general). It does not allocate.
func Mix(h, v uint64) uint64 {
	x := h ^ (v + 0x9e3779b97f4a7c15 + h<<6 + h>>2)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
