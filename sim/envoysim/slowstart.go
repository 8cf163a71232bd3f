package envoysim

import (
	"math"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
)

// slowStartConfig is a compiled Cluster.SlowStartConfig
// (EdfLoadBalancerBase's constructor, source/extensions/
// load_balancing_policies/common/load_balancer_impl.cc): aggression is the
// RuntimeDouble's default_value (1.0 when unset; envoysim has no runtime
// layer, so runtime_key is never consulted), min_weight_percent defaults to
// 10 %. A zero window disables slow start.
type slowStartConfig struct {
	window     time.Duration
	aggression float64
	minWeight  float64 // fraction
}

func compileSlowStart(c *clusterv3.Cluster_SlowStartConfig) *slowStartConfig {
	if c == nil || c.GetSlowStartWindow().AsDuration() < time.Millisecond {
		return nil
	}
	s := &slowStartConfig{window: c.GetSlowStartWindow().AsDuration().Truncate(time.Millisecond), aggression: 1, minWeight: 0.1}
	if a := c.GetAggression(); a != nil {
		s.aggression = a.GetDefaultValue()
	}
	if s.aggression <= 0 || math.IsNaN(s.aggression) {
		s.aggression = 1 // "Invalid runtime value provided for aggression parameter"
	}
	if p := c.GetMinWeightPercent(); p != nil {
		s.minWeight = p.GetValue() / 100
	}
	return s
}

// factor is EdfLoadBalancerBase::applySlowStartFactor for a healthy host
// that passed its last health check (or joined) at since: within the
// window, the weight is scaled by
// max(time_factor^(1/aggression), min_weight_percent) where
// time_factor = max(1 ms, elapsed in whole ms) / window; outside it the
// weight is unchanged.
func (s *slowStartConfig) factor(since, now time.Time) float64 {
	elapsed := now.Sub(since).Truncate(time.Millisecond)
	if elapsed >= s.window {
		return 1
	}
	tf := float64(max(time.Millisecond, elapsed)) / float64(s.window)
	if s.aggression != 1 && tf != 1 {
		tf = math.Pow(tf, 1/s.aggression)
	}
	return max(tf, s.minWeight)
}
