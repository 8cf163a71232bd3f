package envoysim

import (
	"strings"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// testRuntime is a cluster runtime for unit tests, with a fake clock and a
// fixed random value.
func testRuntime(t *testing.T, cc *clusterConfig, rnd uint64) *clusterRuntime {
	t.Helper()
	return newClusterRuntime(cc, 0, runtimeDeps{
		clock:    newFakeClock(),
		rand:     func() uint64 { return rnd },
		stats:    newStatsRegistry(),
		onChange: func(*clusterRuntime) {},
	})
}

// TestRetryBackoff checks JitteredExponentialBackOffStrategy (random %
// interval, the interval doubling until max_interval/2, then max_interval)
// and JitteredLowerBoundBackOffStrategy ([d, 1.5 d)) with a fixed random
// value.
func TestRetryBackoff(t *testing.T) {
	for _, c := range []struct {
		name      string
		base, max time.Duration
		rnd       uint64
		rateLimit time.Duration
		want      []int64 // milliseconds
	}{
		{
			name: "ILB 25ms..250ms", base: 25 * time.Millisecond, max: 250 * time.Millisecond, rnd: 1_000_000,
			want: []int64{0, 0, 0, 0, 0, 0},
		}, // 1e6 is a multiple of 25, 50, 100, 200, 250
		{
			name: "ILB 25ms..250ms, random 999_999", base: 25 * time.Millisecond, max: 250 * time.Millisecond, rnd: 999_999,
			want: []int64{24, 49, 99, 199, 249, 249},
		},
		{
			name: "default max is 10 x base", base: 10 * time.Millisecond, rnd: 999_999,
			want: []int64{9, 19, 39, 79, 99, 99},
		},
		{
			name: "rate limited 2s", base: 25 * time.Millisecond, max: 250 * time.Millisecond, rnd: 1_999, rateLimit: 2 * time.Second,
			want: []int64{2999, 24},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &routev3.RetryPolicy{RetryOn: "5xx", RetryBackOff: &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(c.base)}}
			if c.max > 0 {
				p.RetryBackOff.MaxInterval = durationpb.New(c.max)
			}
			rp, err := compileRetryPolicy(p)
			if err != nil {
				t.Fatal(err)
			}
			rs := newRetryState(rp, testRuntime(t, &clusterConfig{name: "c"}, c.rnd))
			rs.rateLimit = c.rateLimit
			for i, want := range c.want {
				if got := rs.backoff(); got != time.Duration(want)*time.Millisecond {
					t.Errorf("back-off %d = %v, want %dms", i, got, want)
				}
			}
		})
	}
}

// TestResetHeaders checks ResetHeaderParserImpl and parseResetInterval: the
// first header whose interval is at most max_interval wins; intervals of at
// most 1 ms are ignored.
func TestResetHeaders(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	policy := &retryPolicy{
		resetHeaders:     []resetHeader{{name: "retry-after"}, {name: "x-reset", timestamp: true}},
		resetMaxInterval: 5 * time.Second,
	}
	for _, c := range []struct {
		name    string
		headers []string
		want    time.Duration
	}{
		{"seconds", []string{"retry-after", "3"}, 3 * time.Second},
		{"seconds with spaces and plus", []string{"retry-after", " +4 "}, 4 * time.Second},
		{"http date is not seconds", []string{"retry-after", "Wed, 21 Oct 2015 07:28:00 GMT"}, 0},
		{"above max falls to the next header", []string{"retry-after", "60", "x-reset", "1900000002"}, 2 * time.Second},
		{"timestamp in the past", []string{"x-reset", "1899999999"}, 0},
		{"zero is ignored", []string{"retry-after", "0"}, 0},
		{"first value only", []string{"retry-after", "2", "retry-after", "4"}, 2 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := reqHeaders(c.headers...)
			rs := &retryState{p: policy}
			rs.noteRateLimit(h, now)
			if rs.rateLimit != c.want {
				t.Errorf("rate limited back-off %v, want %v", rs.rateLimit, c.want)
			}
		})
	}
}

// TestRetryPolicyRefused: retry features envoysim does not model are
// refused with an error naming them.
func TestRetryPolicyRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		p    *routev3.RetryPolicy
		want string
	}{
		{"grpc retry_on", &routev3.RetryPolicy{RetryOn: "5xx,cancelled"}, `"cancelled"`},
		{"refused-stream", &routev3.RetryPolicy{RetryOn: "refused-stream"}, `"refused-stream"`},
		{"max below base", &routev3.RetryPolicy{RetryOn: "5xx", RetryBackOff: &routev3.RetryPolicy_RetryBackOff{
			BaseInterval: durationpb.New(time.Second), MaxInterval: durationpb.New(time.Millisecond),
		}}, "max_interval must greater than or equal to the base_interval"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := compileRetryPolicy(c.p)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want it to name %s", err, c.want)
			}
		})
	}
}
