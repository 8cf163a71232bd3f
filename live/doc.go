// Package live is the engines' state as the request path uses it, and
// the one translation to it from the signals monitor's snapshot.
//
// The fast loop of ext_proc and the routing benchmark both build their
// live state with [FromSignals], turn a cluster's state into the route
// decision's input with [Cluster.Signal], its replicas into the replica
// picker's candidates with [Cluster.Candidates], and a request into the
// picker's request with [PickerRequest]: what the benchmark measures is
// what ILB does with what its signals see.
//
// A [State] is immutable once built: ext_proc swaps a new one in behind
// an atomic pointer on every signals snapshot.
package live
