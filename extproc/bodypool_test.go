package extproc

import "testing"

// TestBodyPool: a buffer holds at least what was asked; classes cover
// minPooledBody to maxPooledBody; sizes outside are not pooled.
func TestBodyPool(t *testing.T) {
	for _, c := range []struct {
		name  string
		n     int
		class int
	}{
		{"below the smallest class", minPooledBody - 1, -1},
		{"the smallest class", minPooledBody, 0},
		{"just over it", minPooledBody + 1, 1},
		{"256 KiB", 256 << 10, 3},
		{"the largest class", maxPooledBody, len(bodyPools) - 1},
		{"beyond it", maxPooledBody + 1, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := bodyClass(c.n); got != c.class {
				t.Fatalf("class of %d: %d, want %d", c.n, got, c.class)
			}
			b, release := getBody(c.n)
			if len(b) != 0 || cap(b) < c.n {
				t.Fatalf("buffer len %d cap %d for %d", len(b), cap(b), c.n)
			}
			if (release == nil) != (c.class < 0) {
				t.Fatalf("release %v for class %d", release != nil, c.class)
			}
			if release != nil {
				release()
			}
		})
	}
}
