package replica

import (
	"math/rand/v2"
	"testing"
)

// TestBlockTable checks the hash table against a map under random
// inserts, finds and removals, growth and clustering included.
func TestBlockTable(t *testing.T) {
	tests := []struct {
		name string
		key  func(rng *rand.Rand) uint64
	}{
		{"random keys", func(rng *rand.Rand) uint64 { return rng.Uint64N(3000) * 0x9e3779b97f4a7c15 }},
		{"small sequential keys", func(rng *rand.Rand) uint64 { return rng.Uint64N(3000) }},
		{"keys differing only in high bits", func(rng *rand.Rand) uint64 { return rng.Uint64N(3000) << 40 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			var tab blockTable
			ref := map[uint64]int32{}
			for op := range 200_000 {
				k := tt.key(rng)
				switch rng.IntN(3) {
				case 0:
					idx := int32(op + 1)
					want, ok := ref[k]
					if !ok {
						ref[k], want = idx, idx
					}
					if got := tab.findOrInsert(k, idx); got != want {
						t.Fatalf("op %d: findOrInsert(%#x) = %d, want %d", op, k, got, want)
					}
				case 1:
					if _, ok := ref[k]; ok {
						delete(ref, k)
						tab.remove(k)
					}
				default:
					if got := tab.find(k); got != ref[k] {
						t.Fatalf("op %d: find(%#x) = %d, want %d", op, k, got, ref[k])
					}
				}
				if tab.n != len(ref) {
					t.Fatalf("op %d: %d entries, want %d", op, tab.n, len(ref))
				}
			}
			for k, v := range ref {
				if got := tab.find(k); got != v {
					t.Errorf("find(%#x) = %d, want %d", k, got, v)
				}
			}
			tab.clear()
			if tab.find(tt.key(rng)) != 0 || tab.n != 0 {
				t.Error("entries left after clear")
			}
		})
	}
}
