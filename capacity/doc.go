// Package capacity learns, per engine cluster, the throughput one replica
// sustains — the controller's capacity_per_replica — from what the engines
// themselves report, with the configured profile as the prior.
//
// # The model
//
// An engine with continuous batching is a queue whose server is the GPU.
// Its throughput X (token-cost units per second: prompt tokens × the
// model's prompt cost + generated tokens × its output cost, from the
// engines' token counters) equals the arrival rate while it keeps up, and
// its service rate μ once requests queue. In token-cost units μ moves with
// the mix of prompt and output lengths (a long prompt costs more GPU time
// per token: attention grows with the context), so it is measured
// continuously rather than assumed.
//
// Overload is judged in the SLO's terms where the engines export a TTFT
// histogram: more than 1 − ttft_quantile of a window's first tokens over
// the TTFT target while at least one request per replica waits on
// average (a replica at its max_num_seqs queues whatever its queue per
// running request). First tokens over the target with nothing waiting
// are the prompts' own prefill time, which no routing shortens: not
// overload. Only without a histogram (or with too few first tokens in
// the window to judge) is overload a long queue (waiting ≥
// saturation_queue × running, or the KV cache ≥ saturation_kv) at
// every scrape over LastingFor (two scrapes at the default interval):
// where few requests run at once, a queue long per running request can
// wait well within the target. A calm window is
// SmoothTime (15 s) without overload in the same terms.
// Two numbers are learned per cluster:
//
//   - Saturation, μ: during overload the GPU was busy throughout, so X
//     measures μ; a calm window shows μ is at least what it served.
//   - PerReplica, C, what the controller plans with (capacity_per_replica
//     at 100 % utilization, of which it fills the target). Queueing theory
//     says the wait before admission grows without bound as the load nears
//     μ, and how close to μ a cluster may run depends on the mix and on
//     the SLO, so C is learned from its own evidence: overload lowers C
//     toward the sustained throughput X̄ at which it happened (the mean
//     over TimeConstant, the scale the controller plans on, debiased: in
//     a cluster's first TimeConstant it is the mean of what it served so
//     far, not its first interval's — under bursty
//     arrivals a cluster breaks at a lower mean load than under smooth
//     ones, as Kingman's formula says, and the plan must leave room for
//     the bursts), so the plan then loads the cluster to target × X̄,
//     below the point where it broke; a calm
//     window serving X̄ above C raises C toward X̄ (it served that without
//     a queue). C settles between the two.
//
// Anything else (a quiet cluster, unknown counters, a queue for one
// interval only, a window with too few requests to judge a quantile) says
// nothing and leaves the estimates alone: a quiet cluster is not a slow
// one. Token counters are lumpy (a prompt counts when its first token is
// sampled), so evidence is judged on windows, never on one interval, and
// evidence that can only raise an estimate (a calm window) uses the
// window's mean less two standard errors: the maximum of many noisy means
// would otherwise ratchet the estimate past the truth.
//
// # Bounds
//
// Evidence is weighed by an exponential moving average with time constant
// TimeConstant (60 s): after five minutes of steady evidence the prior
// weighs e^-5 < 1 %. An estimate moves by at most a factor
// MaxChangePerMinute per minute either way (2: a prior 3× off is corrected
// within about 1.6 minutes of evidence), and stays within [prior / Range,
// prior × Range] (Range 10): a broken or lying engine cannot make a
// cluster look infinitely fast or dead through this path (dead replicas
// are the health checks' business).
//
// # Concurrency
//
// An Estimator is safe for concurrent use: Observe is called by the
// signals loop; readers get immutable snapshots.
package capacity
