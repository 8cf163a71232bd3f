package extproc

import (
	"testing"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/route"
	"github.com/ilbproject/ilb/weights"
)

func TestPickMatchesEnvoy(t *testing.T) {
	c := newCell(&config.Config{}, config.Source{}, "m", cellOf(3000, 7000))
	for _, tt := range []struct {
		draw uint64
		want string
	}{{0, "a"}, {2999, "a"}, {3000, "b"}, {9999, "b"}, {10000, "a"}, {13000, "b"}, {^uint64(0), "a"}} {
		// ^uint64(0) % 10000 = 1615
		d := route.Decide(c.rc, nil, route.Request{Draw: tt.draw})
		if got, slot := c.targets[d.Chosen].Cluster, d.Slot; got != tt.want || slot != tt.draw%10000 {
			t.Errorf("pick(%d) = %s, slot %d; want %s", tt.draw, got, slot, tt.want)
		}
	}
}

func cellOf(wa, wb uint32) weights.Cell {
	return weights.Cell{Targets: []weights.Target{{Cluster: "a", Weight: wa}, {Cluster: "b", Weight: wb}}}
}
