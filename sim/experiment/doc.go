// Package experiment runs routing experiments in virtual time: a fleet of
// simulated engine replicas (package sim/replica) in several regions, a
// workload (package sim/workload) entering through each region's Envoys,
// and one routing policy deciding where every request goes.
//
// A run is a discrete-event simulation. Requests arrive at their source;
// the policy picks an engine cluster (for the weights-based policies, the
// real weights controller of package weights computes the weights every
// controller tick from the demand the run measures and the replica states,
// a request draws from them as Envoy's weighted_clusters would, and the
// ext_proc fast loop — exclusions of clusters with no serving replica,
// steering away from saturated clusters, planned and saturation shedding —
// can be on or off); the request crosses
// half the round trip, Envoy's least-request picks a replica inside the
// cluster (two random choices), the replica's iteration-level model runs
// it, and its first token crosses back. Scenario events fail, drain and
// restore replicas on a schedule.
//
// The capacity per replica the controller plans with is calibrated from
// the engine model on the scenario's request mix, as an operator would
// with a serving benchmark ([Calibrate]).
//
// Every run is deterministic per seed: the same scenario, policy and seed
// give the same figures. Runs of different policies share the workload.
// A Run is single-threaded and owns its state; [Compare] runs policies in
// parallel.
package experiment
