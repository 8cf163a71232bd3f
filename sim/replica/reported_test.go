package replica

import (
	"testing"
	"time"
)

// TestReportedWaiting: the waiting count an engine's metrics show is its
// scheduler's queue at the end of the last step (vLLM's
// num_requests_waiting, made in update_from_output): a request that
// arrives during a step waits now but is not reported until a step ends
// without admitting it; one the batch cannot take is reported once the
// step that left it ends.
func TestReportedWaiting(t *testing.T) {
	// twoForOne submits two requests at 0 to a replica whose batch takes
	// one, and returns the end of the step that admits the first.
	twoForOne := func(r *Replica) time.Duration {
		r.Submit(0, Request{ID: 1, Prompt: 10, Output: 5})
		r.Submit(0, Request{ID: 2, Prompt: 10, Output: 5})
		at, _ := r.Next()
		return at
	}
	tests := []struct {
		name                      string
		maxSeqs                   int
		run                       func(r *Replica) // leaves r at some time
		wantWaiting, wantReported int
	}{
		{
			name:    "an arrival during a step waits unreported",
			maxSeqs: 4,
			run: func(r *Replica) {
				r.Submit(0, Request{ID: 1, Prompt: 10, Output: 5}) // starts a step
				r.Next()
				r.Submit(200*time.Microsecond, Request{ID: 2, Prompt: 10, Output: 5})
			},
			wantWaiting: 1, wantReported: 0,
		},
		{
			name:    "admitted at the next step: never reported",
			maxSeqs: 4,
			run: func(r *Replica) {
				r.Submit(0, Request{ID: 1, Prompt: 10, Output: 5})
				r.Next()
				r.Submit(200*time.Microsecond, Request{ID: 2, Prompt: 10, Output: 5})
				at, _ := r.Next() // the first step's end
				r.Advance(at, nil)
				at, _ = r.Next() // the second step admits request 2
				r.Advance(at, nil)
			},
			wantWaiting: 0, wantReported: 0,
		},
		{
			name:    "left by a full batch: reported once that step ends",
			maxSeqs: 1,
			run: func(r *Replica) {
				r.Advance(twoForOne(r), nil)
			},
			wantWaiting: 1, wantReported: 1,
		},
		{
			name:    "left by a full batch, the step in progress: not yet reported",
			maxSeqs: 1,
			run: func(r *Replica) {
				twoForOne(r)
				r.Advance(100*time.Microsecond, nil)
			},
			wantWaiting: 1, wantReported: 0,
		},
		{
			name:    "a failure clears it",
			maxSeqs: 1,
			run: func(r *Replica) {
				at := twoForOne(r)
				r.Advance(at, nil)
				r.SetState(at, Failed)
			},
			wantWaiting: 0, wantReported: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newReplica(t, Options{Profile: tinyProfile(64, tt.maxSeqs, 256)})
			tt.run(r)
			if l := r.Load(); l.Waiting != tt.wantWaiting || l.ReportedWaiting != tt.wantReported {
				t.Errorf("waiting %d, reported %d; want %d and %d", l.Waiting, l.ReportedWaiting, tt.wantWaiting, tt.wantReported)
			}
		})
	}
}
