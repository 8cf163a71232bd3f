package workload

import (
	"math"
	"reflect"
	"slices"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	ms := time.Millisecond
	reqs := []Request{
		{At: 0, Source: "eu", Model: "a", Priority: PriorityCritical, Prompt: 32, Output: 10, Session: "eu/1", Prefix: []uint64{1, 2}},
		{At: 200 * ms, Source: "eu", Model: "a", Priority: PriorityStandard, Prompt: 64, Output: 20, Session: "eu/1", Prefix: []uint64{1, 2, 3, 4}},
		{At: 900 * ms, Source: "us", Model: "b", Priority: PriorityStandard, Prompt: 100, Output: 30},
		{At: 3500 * ms, Source: "us", Model: "b", Priority: PriorityStandard, Prompt: 4, Output: 40, Session: "us/1"},
	}
	full := Stats{
		Requests: 4, Span: 4 * time.Second, Rate: 1,
		PromptMean: 50, PromptP99: 100, OutputMean: 25, OutputP99: 40,
		CV1s:   math.Sqrt(1.5), // counts 3, 0, 0, 1
		Window: time.Second, CVWindow: math.Sqrt(1.5),
		Sessions: 2, SessionRequests: 3,
		PrefixShare: 96.0 / 200,
		PerSource: map[string]SourceStats{
			"eu": {Requests: 2, Rate: 0.5, PromptMean: 48, OutputMean: 15},
			"us": {Requests: 2, Rate: 0.5, PromptMean: 52, OutputMean: 35},
		},
		PerModel:    map[string]int{"a": 2, "b": 2},
		PerPriority: map[string]int{PriorityCritical: 1, PriorityStandard: 3},
	}
	unsorted := slices.Clone(reqs)
	slices.Reverse(unsorted)
	tests := []struct {
		name   string
		reqs   []Request
		window time.Duration
		want   Stats
	}{
		{
			name: "empty",
			want: Stats{Window: time.Second, PerSource: map[string]SourceStats{}, PerModel: map[string]int{}, PerPriority: map[string]int{}},
		},
		{
			name:   "1 s windows by default",
			reqs:   reqs,
			window: 0,
			want:   full,
		},
		{name: "order does not matter", reqs: unsorted, window: time.Second, want: full},
		{
			name:   "2 s windows",
			reqs:   reqs[:3],
			window: 2 * time.Second,
			want: Stats{
				Requests: 3, Span: 2 * time.Second, Rate: 1.5,
				PromptMean: 196.0 / 3, PromptP99: 100, OutputMean: 20, OutputP99: 30,
				CV1s:   1, // counts 3, 0
				Window: 2 * time.Second, CVWindow: 0,
				Sessions: 1, SessionRequests: 2,
				PrefixShare: 96.0 / 196,
				PerSource: map[string]SourceStats{
					"eu": {Requests: 2, Rate: 1, PromptMean: 48, OutputMean: 15},
					"us": {Requests: 1, Rate: 0.5, PromptMean: 100, OutputMean: 30},
				},
				PerModel:    map[string]int{"a": 2, "b": 1},
				PerPriority: map[string]int{PriorityCritical: 1, PriorityStandard: 2},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Summarize(tt.reqs, tt.window)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Summarize\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}
