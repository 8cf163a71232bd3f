package signals

import "encoding/json"

// known is v when ok, else nil: JSON null.
func known(v float64, ok bool) *float64 {
	if !ok {
		return nil
	}
	return &v
}

// MarshalJSON writes the values the monitor does not know as null, never
// 0 (/debug/signals): the load when no serving replica's load is known,
// the token and first-token rates when none's are, KV usage and TTFT when
// none reports them.
func (c Cluster) MarshalJSON() ([]byte, error) {
	type plain Cluster
	return json.Marshal(struct {
		plain
		Waiting, Running                                 *float64
		TokensPerSecond                                  *float64
		PromptTokensPerSecond, GenerationTokensPerSecond *float64
		FirstTokensPerSecond, SlowFirstTokensPerSecond   *float64
		TTFTSeconds, KVUsage                             *float64
		PrefillSecondsPerToken                           *float64
	}{
		plain:   plain(c),
		Waiting: known(c.Waiting, c.LoadKnown > 0), Running: known(c.Running, c.LoadKnown > 0),
		TokensPerSecond:       known(c.TokensPerSecond, c.RatesKnown > 0),
		PromptTokensPerSecond: known(c.PromptTokensPerSecond, c.RatesKnown > 0), GenerationTokensPerSecond: known(c.GenerationTokensPerSecond, c.RatesKnown > 0),
		FirstTokensPerSecond: known(c.FirstTokensPerSecond, c.TTFTKnown > 0), SlowFirstTokensPerSecond: known(c.SlowFirstTokensPerSecond, c.TTFTKnown > 0),
		TTFTSeconds: known(c.TTFTSeconds, c.TTFTSecondsKnown), KVUsage: known(c.KVUsage, c.KVKnown),
		PrefillSecondsPerToken: known(c.PrefillSecondsPerToken, c.PrefillKnown),
	})
}

// MarshalJSON writes a replica's unknown values as null: KV usage without
// a gauge, the rates before two good scrapes, TTFT without a histogram.
func (m Metrics) MarshalJSON() ([]byte, error) {
	type plain Metrics
	return json.Marshal(struct {
		plain
		KVUsage                                          *float64
		TokensPerSecond                                  *float64
		PromptTokensPerSecond, GenerationTokensPerSecond *float64
		FirstTokensPerSecond, SlowFirstTokensPerSecond   *float64
		TTFTMeanSeconds                                  *float64
	}{
		plain:                 plain(m),
		KVUsage:               known(m.KVUsage, m.KVKnown),
		TokensPerSecond:       known(m.TokensPerSecond, m.RatesKnown),
		PromptTokensPerSecond: known(m.PromptTokensPerSecond, m.RatesKnown), GenerationTokensPerSecond: known(m.GenerationTokensPerSecond, m.RatesKnown),
		FirstTokensPerSecond: known(m.FirstTokensPerSecond, m.TTFTKnown), SlowFirstTokensPerSecond: known(m.SlowFirstTokensPerSecond, m.TTFTKnown),
		TTFTMeanSeconds: known(m.TTFTMeanSeconds, m.TTFTMeanKnown),
	})
}
