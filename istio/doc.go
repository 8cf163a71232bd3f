// Package istio renders ILB's routing for an Istio mesh, where istiod owns
// the Envoys' routes and clusters and ILB cannot serve its own (package
// xds). For every source whose routing is "cluster" it renders:
//
//   - a VirtualService (networking.istio.io/v1) for the inference hosts,
//     with HTTP routes in match order: one per engine cluster the source may
//     use (x-ilb-route-cluster, which ext_proc sets on every request in
//     this mode); one per model (x-ilb-route-model) with the cell's
//     weights; for a fail-open source, one per model on the client hint
//     x-ilb-model (its name or an alias) with the same weights; and a
//     default route: the default model's weights (fail-open) or a 503 with
//     a JSON body (fail-closed);
//   - an EnvoyFilter (networking.istio.io/v1alpha3) that puts ILB's
//     ext_proc filter before the router of the selected proxies (a gateway
//     or client sidecars), strips client-sent x-ilb-route-* headers before
//     any filter runs, raises the listener's buffer to fit a buffered
//     request body, removes ILB's internal response headers (unless the
//     source allows debug) and gives ILB's routes their idle timeout;
//
// and one DestinationRule per engine service a rendered source may use:
// least-request load balancing with warm-up, outlier detection, connection
// limits, a retry budget and HTTP/2 when the engine speaks it.
//
// Istio's weights are integers summing to 100 per route: each cell's
// weights (summing to 10000) are converted by largest remainder in list
// order, and destinations that round to 0 are dropped.
//
// Render writes the objects as multi-document YAML for GitOps; Objects
// returns them typed. Both are deterministic: the same configuration,
// weights and options give the same bytes. docs/istio.md is the user's
// guide.
package istio
