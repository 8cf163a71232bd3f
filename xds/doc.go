// Package xds is ILB's control plane toward Envoy: it translates the
// configuration and each weights version into the Envoy resources of every
// source (CDS, EDS, RDS, LDS; see [Build] and docs/architecture.md), checks them
// (ValidateAll recursively into every Any, references, Consistent), and
// serves them over ADS, state of the world and delta, from a
// go-control-plane snapshot cache keyed by node.cluster ([Server]).
//
// Versions are per-type content hashes, so an Envoy receives only the
// types that changed and a version never names two contents, across
// restarts too. The server admits each stream's peer for its node's
// source ([Options.Authorizer]), refuses nodes of unknown sources, and
// tracks which version each node acknowledged or rejected ([Server.Nodes]).
// A node's NACK holds that node on the version it runs (it is not sent the
// rejected version again); a version is banned for a whole source only
// when a canary, or a quorum (envoy.rollout.nack_quorum) of the source's
// connected nodes, rejects it ([Server.Rollouts]). Nodes gone for
// envoy.rollout.node_ttl are forgotten.
package xds
