package extproc

import (
	"reflect"
	"testing"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/decision"
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

// TestPickRecordCopyOf: the first copy of a pick's decision is written in
// the pick's own memory, and leaves the decision as it was; a copy of
// that copy, or of another decision, is a new one.
func TestPickRecordCopyOf(t *testing.T) {
	p := &pickRecord{decision: decision.ReplicaDecision{Chosen: "10.0.0.1:8000", Reason: "load"}}
	c := p.copyOf(&p.decision)
	if c != &p.served || !reflect.DeepEqual(*c, p.decision) {
		t.Fatalf("the first copy = %p %+v; want p.served, equal to the decision", c, c)
	}
	c.Served = "chosen"
	if p.decision.Served != "" {
		t.Error("writing on the copy changed the decision")
	}
	again := p.copyOf(c)
	if again == c || again == &p.decision || !reflect.DeepEqual(*again, *c) {
		t.Errorf("a copy of the copy = %p %+v; want a new one equal to it", again, again)
	}
	var none *pickRecord
	if d := none.copyOf(&p.decision); d == &p.decision || !reflect.DeepEqual(*d, p.decision) {
		t.Errorf("a copy without a pick = %p %+v; want a new one", d, d)
	}
}
