package picker

import (
	"fmt"
	"testing"
)

// BenchmarkDecision is the request-path cost of a replica decision for a
// 32 KiB prompt (about 8k tokens) over 8 replicas whose caches are warm:
// hashing the prompt's 128 blocks, the binary searches, the booking and
// the ticket's settlement.
func BenchmarkDecision(b *testing.B) {
	for _, size := range []int{1 << 10, 32 << 10, 256 << 10} {
		b.Run(fmt.Sprintf("prompt=%dKiB/replicas=8", size>>10), func(b *testing.B) {
			c := NewCluster(Options{CacheTokens: 1 << 20})
			reps := make([]Replica, 8)
			for i := range reps {
				reps[i] = Replica{Address: fmt.Sprintf("10.0.0.%d:8000", i+1), Ramp: 1}
			}
			texts := make([][]byte, 64) // 64 conversations share a system prompt
			system := prompt("system", min(4<<10, size/2))
			for i := range texts {
				texts[i] = append(append([]byte(nil), system...), prompt(fmt.Sprint("conversation", i), size-len(system))...)
				if len(texts[i]) > size {
					texts[i] = texts[i][:size]
				}
				_, tk := c.Pick(reps, Request{Blocks: AppendBlocks(nil, Seed("m"), texts[i]), PromptTokens: size / 4})
				tk.Done()
			}
			buf := make([]uint64, 0, MaxBlocks)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				text := texts[i%len(texts)]
				_, tk := c.Pick(reps, Request{Blocks: AppendBlocks(buf[:0], Seed("m"), text), PromptTokens: len(text) / 4, Draw: uint64(i)})
				tk.FirstToken()
				tk.Done()
			}
		})
	}
}
