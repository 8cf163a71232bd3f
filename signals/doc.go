// Package signals is ILB's eyes on the engines: it finds the replicas of
// every engine cluster (static list, DNS or a file), probes their health,
// scrapes their Prometheus metrics, runs each replica through a small state
// machine and publishes an immutable [Snapshot] of the whole fleet.
//
// # Loop
//
// A [Monitor] (one per process, built by [New]) owns everything. [Monitor.Run]
// is its only goroutine that mutates state; scrapes and discoveries run in
// short-lived worker goroutines whose results are applied back on the Run
// goroutine, so the state machine needs no locks. Every replica is scraped
// every Signals.Interval (±10% jitter, derived deterministically from the
// address and the scrape count): GET HealthPath (2xx = alive), then, when
// alive, GET Metrics.Path. At most Signals.Concurrency scrapes are in flight
// across all replicas; each request has its own Signals.Timeout; a metrics
// body over Signals.MaxBodyBytes is an error, never a large read. After a
// failed health probe the replica is probed again after Signals.RetryDelay
// (until it is declared unhealthy), so a dead replica is unhealthy within
// about Interval + RetryDelay with UnhealthyAfter = 2.
//
// # States
//
//	starting  ── alive on the monitor's first round ──────────────► ready
//	starting  ── alive later (new replica) ──► warming ── Warmup ──► ready
//	any serving ── UnhealthyAfter failed probes in a row ──► unhealthy
//	unhealthy ── HealthyAfter good probes in a row ──► warming (or ready when Warmup is 0)
//	ready ── alive but no good metrics for StaleAfter intervals ──► stale ── good metrics ──► ready
//	any ── discovery says drain, or the target left discovery ──► draining
//
// A replica that left discovery stays draining for one discovery Refresh,
// then disappears. Warming replicas count for a linear share of a ready
// replica, 0.1 → 1 over Signals.Warmup; stale replicas count as full
// capacity but their load is unknown (never saturated, not in the sums).
//
// # Metrics
//
// Engine metrics are read with prometheus/common/expfmt's text parser. The
// monitor asks for the Prometheus text format; an OpenMetrics 1.0 answer
// (by Content-Type) is normalised to it line by line first, because
// expfmt's own OpenMetrics parser costs milliseconds per line (see
// openmetrics.go). Before parsing, lines of families the cluster's mapping
// does not read are dropped — only well-formed ones: anything the filter
// cannot classify goes to the parser, which reports it at its original
// line — which makes a scrape of a vLLM answer about ten times cheaper and
// a broken line in an unrelated family harmless. The built-in mappings per
// engine are in mapping_builtin.go, with their sources. A value that is
// NaN, infinite, negative (or a KV usage above 1) is unknown with a
// problem, never 0 and never clamped; a counter that goes down is a reset.
//
// # Publishing
//
// The snapshot is swapped atomically. State changes (a replica's state, the
// replica set, a saturation mark) are published at once and reported to
// Options.OnChange; pure value changes (queue lengths, KV usage, warming
// ramps) are published at most every Interval/10 while Run runs.
package signals
