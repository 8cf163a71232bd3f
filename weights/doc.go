// Package weights is the vocabulary of ILB's routing and the policies
// that compute it: for every source and model, the share of traffic each
// engine cluster gets.
//
// The result is a [Weights]: an immutable value whose version is a hash of
// its routing content, holding per (source, model) an ordered list of
// (engine cluster, integer weight) summing to [Total], the shed fraction
// per [Priority], and an explanation. A [Policy] computes it from an
// [Input] — the demand per (source, model, priority) and each cluster's
// [ClusterState] — as a pure function: round_robin (equal shares over the
// eligible clusters), proportional (shares proportional to capacity),
// waterfall, and the optimizer (docs/controller.md). Eligible means: serves
// the model, in a region the source's residency allows, with capacity > 0.
//
// The package has no metrics, tracing or I/O: the request path (package
// route) and the benchmark take its types alone. Package controller runs
// a policy every tick and publishes the versions.
package weights
