// Package picker chooses the replica of an engine cluster a request goes
// to, after the cluster draw: the one with the least work the request
// finds and adds there, counting what its prefix cache already holds of
// the prompt.
//
// ILB cannot see inside the engines' KV caches, so each [Cluster] keeps
// an approximate index learned from its own routing: a replica ILB sent
// a prompt to holds that prompt's blocks (see [AppendBlocks]) until as
// many other blocks have been sent there as its cache holds. Load is
// ILB's own requests on each replica: those in flight with their
// expected decode work, and the prefill tokens of those still without a
// first token.
//
// The rule: a request's cost on a replica is the prefill tokens queued
// there (Awaiting), plus the decode work of the requests in flight there
// (Decode), plus its own prompt tokens the replica does not hold weighted
// by 1 + the shortest queue among the candidates, all over the replica's
// warm-up ramp; the least cost wins. A long cached prefix wins only while
// the work in front of it is less than the prefill it saves; a hot prefix
// therefore spreads to a second replica once the first one's load
// outweighs it, and a prefix every request shares does not keep the
// replicas that lack it idle. Ties go to fewer requests in flight, then to
// a replica whose engine does not report saturation, then rotate with the
// request's draw. A request ILB decided without reading its prompt is
// credited through its session key instead (Request.Session).
//
// A request for a LoRA adapter (Request.Adapter) first narrows the
// candidates to the best adapter tier: replicas that have the adapter in
// a GPU slot as far as ILB can tell (their engine reports requests of it
// running or waiting, or it is among the last max_lora adapters ILB sent
// there: vLLM's slots are an LRU) and are not saturated; else replicas
// that have it but are saturated, while those holding it are no fewer
// than the adapter's share of the cluster's recent requests asks for
// (its share × the candidates), and replicas ILB sent it to before that
// are not saturated (the engine's CPU cache likely holds it: a copy
// into a slot, not a load from disk); else those with a free slot (a hot
// adapter spreads so, over as many replicas as its load takes) or the
// adapter but saturated; else all (every slot taken by other adapters:
// it waits for one). The cost rule decides within the tier. See
// [Adapters].
//
// The decision reaches Envoy as an ordered host list (override-host
// load balancing): a retry takes the next host, and Envoy's own
// least-request policy is the fallback when no listed host is in the
// cluster.
//
// Concurrency: a Cluster is safe for concurrent use; Tickets are owned by
// the request that got them.
package picker
