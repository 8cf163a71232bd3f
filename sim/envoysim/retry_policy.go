package envoysim

import (
	"errors"
	"fmt"
	"strings"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
)

// Retry conditions (RetryPolicy::RETRY_ON_*, source/common/router/
// retry_state_impl.cc parseRetryOn).
const (
	retryOn5xx uint32 = 1 << iota
	retryOnGatewayError
	retryOnConnectFailure
	retryOnRetriable4xx
	retryOnRetriableStatusCodes
	retryOnReset
	retryOnEnvoyRateLimited
)

// retryOnBit maps a retry_on value envoysim models to its condition.
func retryOnBit(v string) (uint32, bool) {
	switch v {
	case "5xx":
		return retryOn5xx, true
	case "gateway-error":
		return retryOnGatewayError, true
	case "connect-failure":
		return retryOnConnectFailure, true
	case "retriable-4xx":
		return retryOnRetriable4xx, true
	case "retriable-status-codes":
		return retryOnRetriableStatusCodes, true
	case "reset":
		return retryOnReset, true
	case "envoy-ratelimited":
		return retryOnEnvoyRateLimited, true
	}
	return 0, false
}

// Retry defaults (RetryPolicyImpl, retry_policy_impl.h): one retry, one host
// selection retry, 25 ms base back-off (runtime upstream.base_retry_backoff_ms)
// capped at 10 × base, rate-limited back-off capped at 300 s.
const (
	defaultNumRetries          = 1
	defaultHostSelectionRetry  = 1
	defaultRetryBaseInterval   = 25 * time.Millisecond
	defaultResetMaxInterval    = 300 * time.Second
	previousHostsPredicateName = "envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate"
)

// resetHeader is a rate_limited_retry_back_off reset header.
type resetHeader struct {
	name      string
	timestamp bool // UNIX_TIMESTAMP; else SECONDS
}

// retryPolicy is a compiled RetryPolicy (RetryPolicyImpl).
type retryPolicy struct {
	retryOn          uint32
	numRetries       uint32
	statusCodes      []uint32
	perTryTimeout    time.Duration
	previousHosts    bool
	hostSelection    uint32
	baseInterval     time.Duration
	maxInterval      time.Duration
	resetHeaders     []resetHeader
	resetMaxInterval time.Duration
}

func compileRetryPolicy(p *routev3.RetryPolicy) (*retryPolicy, error) {
	if p == nil {
		return nil, nil
	}
	rp := &retryPolicy{
		numRetries:       defaultNumRetries,
		statusCodes:      p.GetRetriableStatusCodes(),
		perTryTimeout:    p.GetPerTryTimeout().AsDuration(),
		hostSelection:    defaultHostSelectionRetry,
		baseInterval:     defaultRetryBaseInterval,
		resetMaxInterval: defaultResetMaxInterval,
	}
	var errs []error
	for _, v := range strings.Split(p.GetRetryOn(), ",") {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		bit, ok := retryOnBit(v)
		if !ok {
			errs = append(errs, fmt.Errorf("retry_policy.retry_on %q is not supported by envoysim (5xx, gateway-error, connect-failure, retriable-4xx, retriable-status-codes, reset, envoy-ratelimited)", v))
			continue
		}
		rp.retryOn |= bit
	}
	if n := p.GetNumRetries(); n != nil {
		rp.numRetries = n.GetValue()
	}
	if n := p.GetHostSelectionRetryMaxAttempts(); n != 0 {
		rp.hostSelection = uint32(n)
	}
	for i, hp := range p.GetRetryHostPredicate() {
		m, err := hp.GetTypedConfig().UnmarshalNew()
		if _, ok := m.(*previoushostsv3.PreviousHostsPredicate); err != nil || !ok {
			errs = append(errs, fmt.Errorf("retry_policy.retry_host_predicate[%d]: only %s is supported by envoysim", i, previousHostsPredicateName))
			continue
		}
		rp.previousHosts = true
	}
	if b := p.GetRetryBackOff(); b != nil {
		rp.baseInterval = max(b.GetBaseInterval().AsDuration().Truncate(time.Millisecond), time.Millisecond)
		if m := b.GetMaxInterval(); m != nil {
			rp.maxInterval = max(m.AsDuration().Truncate(time.Millisecond), time.Millisecond)
			if rp.maxInterval < rp.baseInterval {
				errs = append(errs, errors.New("retry_policy.max_interval must greater than or equal to the base_interval"))
			}
		}
	}
	if rp.maxInterval == 0 {
		rp.maxInterval = 10 * rp.baseInterval
	}
	if rl := p.GetRateLimitedRetryBackOff(); rl != nil {
		for _, h := range rl.GetResetHeaders() {
			rp.resetHeaders = append(rp.resetHeaders, resetHeader{
				name:      strings.ToLower(h.GetName()),
				timestamp: h.GetFormat() == routev3.RetryPolicy_UNIX_TIMESTAMP,
			})
		}
		if m := rl.GetMaxInterval(); m != nil {
			rp.resetMaxInterval = max(m.AsDuration().Truncate(time.Millisecond), time.Millisecond)
		}
	}
	return rp, errors.Join(errs...)
}
