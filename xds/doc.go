// Package xds is ILB's control plane toward Envoy: it translates the
// configuration and each weights version into the Envoy resources of every
// source (CDS, EDS, RDS, LDS; see [Build] and DESIGN §2), checks them
// (ValidateAll recursively into every Any, references, Consistent), and
// serves them over ADS, state of the world and delta, from a
// go-control-plane snapshot cache keyed by node.cluster ([Server]).
//
// Versions are per-type content hashes, so an Envoy receives only the
// types that changed and a version never names two contents, across
// restarts too. The server tracks which version each node acknowledged or
// rejected ([Server.Nodes]) and refuses nodes of unknown sources.
package xds
