package envoysim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
)

// grpcRetry is the ext_proc filter's grpc_service.retry_policy: the
// default retry policy of its async gRPC streams (GrpcService.retry_policy:
// "used as the default" when a stream sets none, honoured by envoy_grpc
// clients; the ext_proc client starts every stream with
// setBufferBodyForRetry(true), client_impl.cc). Envoy converts it to a route
// retry policy (Http::Utility::convertCoreToRouteRetryPolicy) that the
// async client's router applies to the stream: a stream that fails before
// its response headers (the connection refused or reset, the stream
// refused, a trailers-only UNAVAILABLE) is retried on another attempt, with
// what it sent so far replayed; once the server has answered, a failure is
// final.
//
// envoysim models it at the stream's first exchange: grpc-go reports the
// failures above as UNAVAILABLE before any response, and the request's
// first message is the only one sent before the first response (the filter
// waits for it before sending the body).
type grpcRetry struct {
	numRetries int
	on         map[string]bool
	base, max  time.Duration
	// previousHosts: retry_host_predicate previous_hosts; an attempt
	// re-picks up to hostAttempts times to avoid the hosts tried.
	previousHosts bool
	hostAttempts  int64
}

// grpcRetryOn are the retry_on conditions a failure before the response
// (UNAVAILABLE in grpc-go) matches.
var grpcRetryOn = []string{"connect-failure", "refused-stream", "reset", "unavailable", "5xx", "gateway-error"}

// Default back-off of a route retry policy (25 ms base, ten times that at
// most: RetryStateImpl).
const (
	grpcRetryBase = 25 * time.Millisecond
	previousHosts = "envoy.retry_host_predicates.previous_hosts"
)

func compileGRPCRetry(p *corev3.RetryPolicy) (*grpcRetry, error) {
	if p == nil {
		return nil, nil
	}
	r := &grpcRetry{numRetries: 1, on: map[string]bool{}, base: grpcRetryBase, hostAttempts: p.GetHostSelectionRetryMaxAttempts()}
	if n := p.GetNumRetries(); n != nil {
		r.numRetries = int(n.GetValue())
	}
	var errs []error
	for c := range strings.SplitSeq(p.GetRetryOn(), ",") {
		if c = strings.TrimSpace(c); c == "" {
			continue
		}
		r.on[c] = true
	}
	if b := p.GetRetryBackOff(); b != nil {
		r.base = b.GetBaseInterval().AsDuration()
		if b.GetMaxInterval() != nil {
			r.max = b.GetMaxInterval().AsDuration()
		}
	}
	if r.max == 0 {
		r.max = 10 * r.base
	}
	for _, hp := range p.GetRetryHostPredicate() {
		if hp.GetName() != previousHosts && hp.GetTypedConfig().MessageName() != "envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate" {
			errs = append(errs, fmt.Errorf("grpc_service.retry_policy.retry_host_predicate %q is not modelled (%s)", hp.GetName(), previousHosts))
			continue
		}
		r.previousHosts = true
	}
	if p.GetRetryPriority() != nil {
		errs = append(errs, errors.New("grpc_service.retry_policy.retry_priority is not modelled"))
	}
	return r, errors.Join(errs...)
}

// retries reports whether a failed first exchange is retried.
func (r *grpcRetry) retries(res exchangeResult) bool {
	if r == nil || res.kind != resGRPCError || res.code != codes.Unavailable {
		return false
	}
	for _, c := range grpcRetryOn {
		if r.on[c] {
			return true
		}
	}
	return false
}

// backoff is the wait before retry n (from 0): a random share of the
// exponentially growing interval, as Envoy's JitteredExponentialBackOff.
func (r *grpcRetry) backoff(n int) time.Duration {
	d := r.base << min(n, 10)
	if d <= 0 || d > r.max {
		d = r.max
	}
	return time.Duration(rand.Int64N(int64(d)) + 1)
}

// exchange is exchangeOnce with grpc_service.retry_policy applied to
// the stream's first exchange: each retry opens a new stream on a host
// other than those tried (with previous_hosts) and sends req again.
func (f *extProcFilter) exchange(ctx context.Context, req *extprocv3.ProcessingRequest) exchangeResult {
	res := f.exchangeOnce(ctx, req)
	r := f.cfg.retry
	if f.answered || !r.retries(res) {
		return res
	}
	var tried []string
	for n := 0; n < r.numRetries && r.retries(res); n++ {
		if f.lastHost != "" { // the host of the stream that failed (open sets it)
			tried = append(tried, f.lastHost)
		}
		if f.st != nil {
			f.destroy()
		}
		if !sleep(ctx, r.backoff(n)) {
			return exchangeResult{kind: resAborted}
		}
		f.avoid = nil
		if r.previousHosts {
			f.avoid = func(addr string) bool {
				for _, t := range tried {
					if t == addr {
						return true
					}
				}
				return false
			}
		}
		f.s.e.stats.extProc(func(s *ExtProcStats) { s.StreamRetries++ })
		res = f.exchangeOnce(ctx, req)
	}
	return res
}
