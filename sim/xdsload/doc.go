// Package xdsload is the xDS fleet benchmark: a load generator of
// simulated Envoys (one gRPC connection and one ADS stream each, state of
// the world or delta) that subscribe and acknowledge as Envoy does, and a
// server role that runs ILB's own xDS server (xds.Server) in a process of
// its own, so that the CPU and memory measured are ILB's alone.
//
// `ilb bench-xds` (make bench-xds) drives both: time until every Envoy
// holds its full configuration at connect, time from a new weights
// version (or an EDS-only change) until the last Envoy acknowledged it,
// ILB's CPU for each, and its heap and resident memory per connected
// Envoy; or waves of Envoys with new node ids, to show what ILB keeps of
// those that left.
package xdsload
