package extproc

// stackFrame is the frame a stream's goroutine takes once, at the top of
// serve (bytes). gRPC serves each stream on a new goroutine, which starts
// on a small stack; answering a request goes deeper (gRPC's receive path,
// the body scan, the decision and the picker: under 8 KiB, measured by
// moving this bound), and each doubling on the way down copied and
// re-pointed every frame already on the stack: 8% of ext_proc's CPU at
// 1 KiB bodies. Growing once at the top copies only gRPC's few frames;
// the 16 KiB stack this gives comes from the runtime's per-P cache and
// goes back to it when the stream ends.
const stackFrame = 8 << 10

// growStack makes the calling goroutine's stack hold at least stackFrame
// more bytes. It does nothing else: pass 0. The frame is reserved (and
// the stack grown) on entry, but its buffer is only cleared and touched
// for another n, which the compiler cannot rule out: zeroing 8 KiB on
// every stream cost as much as a tenth of the growth itself.
//
//go:noinline
func growStack(n int) byte {
	if n != 0 {
		var buf [stackFrame]byte
		return touch(buf[:])
	}
	return 0
}

// touch reads the buffer, so that growStack's frame is kept.
//
//go:noinline
func touch(b []byte) byte { return b[len(b)-1] }
