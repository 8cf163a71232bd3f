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
// about Interval + RetryDelay with UnhealthyAfter = 2 when it refuses
// connections, and about two intervals when it does not answer (see
// Blindness). Probes and metrics use separate HTTP clients (connection
// pools), and a request's timeout starts once its scrape has a worker
// slot, so neither a slow metrics body nor a queue for slots eats into a
// probe's time.
//
// # States
//
//	starting  ── alive on the monitor's first round ──────────────► ready
//	starting  ── alive later (new replica) ──► warming ── Warmup ──► ready
//	any serving ── UnhealthyAfter failed probes in a row ──► unhealthy
//	               (silent ones: and for two intervals, and not blind)
//	unhealthy ── HealthyAfter good probes in a row ──► warming (or ready when Warmup is 0)
//	ready ── alive but no good metrics for StaleAfter intervals ──► stale ── good metrics ──► ready
//	any ── discovery says drain, or the target left discovery ──► draining
//
// A replica that left discovery stays draining for one discovery Refresh,
// then disappears. Warming replicas count for a linear share of a ready
// replica, 0.1 → 1 over Signals.Warmup; stale replicas count as full
// capacity but their load is unknown (never saturated, not in the sums).
// A ready replica goes stale only while its health probes answer; one
// whose probes fail goes unhealthy instead (or is held, see Blindness).
//
// # Discovery errors
//
// A discovery error keeps the last known replicas; it is shown as the
// cluster's DiscoveryError and logged (WARN, once per new message). It is
// a DNS failure, or for a file: one that cannot be read, is over 16 MiB,
// has a malformed line (the first five are named, each quoted up to 64
// bytes), or is empty or only whitespace — what a file rewritten in place
// (truncated, then written) looks like for a moment, or a lost volume. An
// explicit empty list is a file with only comment lines: it drains every
// replica. A partial rewrite that happens to parse cannot be told from a
// smaller fleet: write the file elsewhere and rename it over the old one.
//
// # Blindness
//
// A failed probe is definite when the replica or its host answered:
// connection refused (a host without a listener on the port: a dead
// engine process), a reset or close after connecting, an HTTP status
// other than 2xx, or a DNS name that does not exist. It is silent
// otherwise: a timeout, no route, an error of ILB's own. Definite
// failures make a replica unhealthy after UnhealthyAfter in a row, always.
//
// Silent failures are what the monitor also sees when it is itself the
// problem: starved of CPU (tens of thousands of ext_proc streams, a loaded
// node), its probes time out for every replica at once, and a monitor
// that believed them would declare a healthy fleet dead — the fast loop
// would exclude every cluster and the controller plan for no capacity.
// Independent clusters (other machines, other racks, other regions) do
// not hang at the same moment; an observer that cannot see does. So the
// monitor takes itself for blind when either holds:
//
//   - silent failures hit, at once, more than Signals.BlindFraction (or
//     all) of the replicas taking traffic in at least two clusters (so at
//     least two replicas). "Taking traffic" counts replicas that are
//     serving or starting, plus those whose failure streak began within
//     the last two intervals and which took traffic before it (a replica
//     that has just gone unhealthy); one that went away earlier counts
//     for nothing. With BlindFraction 1, all of them. One cluster alone
//     is never blindness: that is a real partial outage, and its replicas
//     go unhealthy.
//   - its own loop falls behind: it wakes more than one Interval later
//     than it asked to (measured on the injected clock, with real
//     scheduling), or a scrape waited more than one Interval for a worker
//     slot. This counts for two intervals after the last sign.
//
// While blind, replicas whose failure streak is silent keep their last
// known state: no transition to unhealthy (nor to stale), so no warm-up
// ramp either when they answer again; a starting replica stays one that
// is ready on its first good probe. Definite failures count as always,
// and replicas that answer are followed as always. A silent failure of a
// scrape that waited more than an Interval for its slot is not held
// against the replica at all. The snapshot says so ([Snapshot.Blind],
// with the reason and since when), ilb_signals_blind is 1, one WARN line
// is logged on entering and one INFO line on leaving, and the controller
// fails static with reason blind ([Monitor.Blind] is its guard). Because
// the held replicas keep serving, the fast loop excludes no cluster for
// them.
//
// To let the rule decide before any replica changes, a silent streak
// makes a replica unhealthy only once it has lasted two intervals (by
// then every replica has been probed since it began) and the monitor is
// not blind. When blindness ends, every streak still silent starts that
// clock again: a replica that still does not answer is unhealthy two
// intervals after the monitor can see again.
//
// The cost: a replica that hangs (rather than dies) is unhealthy after
// about two intervals instead of one, and a real fleet-wide partition
// that swallows packets in two clusters or more (no refusals) reads as
// blindness: the last known state holds, the alert ILBBlind fires, and
// Envoy's own health checks and outlier detection still eject hosts
// that do not answer. Size Signals.Concurrency for the probes that may
// hang at once (Concurrency >= replicas × Timeout/Interval), or a
// large real outage fills the worker slots and reads as lag.
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
