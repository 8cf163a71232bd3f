package signals

import (
	"time"

	"github.com/ilbproject/ilb/capacity"
)

// Observation is the cluster's interval at at as the capacity estimator
// takes it: sums over its serving replicas whose load and token rates are
// known, and the TTFT rates when every one of them measured them. A
// cluster whose load and rates are known for different replicas gives no
// observation (Replicas 0): the sums would not be over one set.
func (c Cluster) Observation(at time.Time) capacity.Observation {
	n := c.LoadKnown
	if c.RatesKnown != n {
		n = 0 // sums over different replicas: not one observation
	}
	o := capacity.Observation{
		At: at, Replicas: n, Waiting: c.Waiting, Running: c.Running, KVUsage: c.KVUsage, KVKnown: c.KVKnown,
		PromptTokensPerSecond: c.PromptTokensPerSecond, GenerationTokensPerSecond: c.GenerationTokensPerSecond,
	}
	if c.TTFTKnown == n && n > 0 {
		o.FirstTokensPerSecond, o.SlowFirstTokensPerSecond, o.TTFTKnown = c.FirstTokensPerSecond, c.SlowFirstTokensPerSecond, true
	}
	return o
}
