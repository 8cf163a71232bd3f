// Package kube is ILB's Kubernetes discovery: it finds an engine
// cluster's replicas in the EndpointSlices of a Service ([Service]) or in
// the Pods of a Gateway API Inference Extension InferencePool ([Pool]),
// on one or several API servers (config kubernetes.api_servers: a
// kubeconfig context each, or the in-cluster configuration), and hands
// them to the signals monitor as [signals.Watcher]s.
//
// # Watches
//
// Each discoverer runs client-go Reflectors (list, then watch; relist
// when the watch expires) scoped to exactly what ILB routes to: the
// slices labelled kubernetes.io/service-name=<service> and the Service by
// metadata.name, the pool by metadata.name, its Pods by the pool's
// selector. The API server filters,
// so ILB's memory follows its replicas, not the size of the namespace;
// what is kept of each object is a few strings (address, condition,
// zone). Every change wakes the monitor at once (Watcher.Changed), which
// reads the discoverer's cache (Discover).
//
// # Mapping
//
//   - EndpointSlice endpoint (its first address, canonical; the IPv4
//     slices of a dual-stack Service): ready → a replica (the monitor
//     probes it); terminating → draining ("discovery: terminating"); not
//     ready → draining ("discovery: not ready"). The port is the slices'
//     port named by discovery.kubernetes.port (no slice with endpoints
//     having it is an error), or their only one; a number outside
//     1..65535 is an error. A valid zone is kept and shown (hints are not
//     acted on). No slice left → no replica: its replicas drain, then
//     go. The Service itself is watched by name: one that does not exist
//     is an error, and the last replicas are held.
//   - InferencePool Pod with an IP, on each target port: Ready → a
//     replica; being deleted → draining ("pod terminating"); not Ready →
//     draining ("pod not ready"); ended or without an IP → none. A pool
//     that does not exist, or whose spec is unusable (an empty selector,
//     no target port), is an error: the last replicas are held.
//
// # An API server out of reach
//
// A watch whose last list or watch call failed (connection refused, a
// timeout, 403) is stale: Discover returns an error naming the API
// server, the object and since when, and the monitor keeps the replicas
// it last knew (never drains them for the silence), shows the error
// (ilb signals, the cluster's DiscoveryError) and exports
// ilb_signals_discovery_stale_seconds. The Reflector retries every 200 ms
// growing to 2 s; the first list or watch that works clears the error and
// the relist catches up whatever changed meanwhile. An expired resource
// version or a 429 is not an outage. A server that stops answering
// without closing connections is noticed by client-go's HTTP/2 health
// check (a ping after 30 s idle, 15 s timeout), then by the next call
// failing: up to about 75 s.
package kube
