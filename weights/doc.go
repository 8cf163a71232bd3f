// Package weights is ILB's controller, the slow loop: it computes, for
// every source and model, the share of traffic each engine cluster gets.
//
// The result is a [Weights]: an immutable value whose version is a hash of
// its routing content, holding per (source, model) an ordered list of
// (engine cluster, integer weight) summing to [Total], the shed fraction
// per [Priority], and an explanation. A [Policy] computes it from an
// [Input]; the [Controller] runs the policy every tick and publishes each
// new version to its sinks (the xDS server, the ext_proc service) in
// order, keeping the last good version when a sink rejects a new one.
//
// Policies today: round_robin (equal shares over the eligible clusters)
// and proportional (shares proportional to capacity). Eligible means:
// serves the model, in a region the source's residency allows, with
// capacity > 0. The optimizer (docs/controller.md) implements the same Policy
// interface.
package weights
