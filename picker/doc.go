// Package picker chooses the replica of an engine cluster a request goes
// to, after the cluster draw: the one with the least prefill work ahead
// of the request's first token, counting what its prefix cache already
// holds of the prompt.
//
// ILB cannot see inside the engines' KV caches, so each [Cluster] keeps
// an approximate index learned from its own routing: a replica ILB sent
// a prompt to holds that prompt's blocks (see [AppendBlocks]) until as
// many other blocks have been sent there as its cache holds. Load is
// ILB's own requests on each replica: those in flight, and the prefill
// tokens of those still without a first token.
//
// The rule: a request's cost on a replica is the prefill tokens queued
// there (Awaiting) plus its own prompt tokens the replica does not hold,
// divided by the replica's warm-up ramp; the least cost wins among the
// replicas whose engines do not report saturation. A long cached prefix
// wins only while the queue in front of it is shorter than the prefill it
// saves; a hot prefix therefore spreads to a second replica as soon as
// the first one's queue exceeds the prompt's length. Ties (no cache hit,
// equal queues) go to fewer requests in flight, then rotate with the
// request's draw.
//
// The decision reaches Envoy as an ordered host list (override-host
// load balancing): a retry takes the next host, and Envoy's own
// least-request policy is the fallback when no listed host is in the
// cluster.
//
// Concurrency: a Cluster is safe for concurrent use; Tickets are owned by
// the request that got them.
package picker
