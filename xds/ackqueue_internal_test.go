package xds

import (
	"fmt"
	"testing"
)

// TestACKQueueKeepsLatestPerNode: however many ACKs arrive before the
// rollout loop takes them, none is dropped: every node that answered is
// there once, with its latest event, in the order nodes first answered.
func TestACKQueueKeepsLatestPerNode(t *testing.T) {
	tests := []struct {
		name         string
		nodes, acks  int // acks per node
		takeMidway   bool
		wantFirstRef string
	}{
		{"one node, one ACK", 1, 1, false, "n0"},
		{"far more ACKs than the old 1,024-slot queue", 5000, 20, false, "n0"},
		{"taken midway: the rest comes in the next batch", 300, 4, true, "n0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := newACKQueue()
			got := map[nodeRef]event{}
			order := []nodeRef{}
			takeAll := func() {
				for _, e := range q.take() {
					if _, seen := got[e.ref]; !seen {
						order = append(order, e.ref)
					}
					got[e.ref] = e
				}
			}
			for a := range tc.acks {
				for n := range tc.nodes {
					q.push(event{ref: nodeRef{source: "s", id: fmt.Sprintf("n%d", n)}, version: fmt.Sprint(a)})
				}
				if tc.takeMidway && a == tc.acks/2 {
					select {
					case <-q.wake:
					default:
						t.Fatal("no wake-up token with events pending")
					}
					takeAll()
				}
			}
			select {
			case <-q.wake:
			default:
				t.Fatal("no wake-up token with events pending")
			}
			takeAll()
			if q.len() != 0 {
				t.Errorf("%d events left after take", q.len())
			}
			if len(got) != tc.nodes {
				t.Fatalf("%d nodes' events; want %d (none dropped)", len(got), tc.nodes)
			}
			for ref, e := range got {
				if e.version != fmt.Sprint(tc.acks-1) {
					t.Errorf("node %s: event of ACK %s; want the latest (%d)", ref.id, e.version, tc.acks-1)
				}
			}
			if order[0].id != tc.wantFirstRef {
				t.Errorf("first node %s; want %s", order[0].id, tc.wantFirstRef)
			}
		})
	}
}
