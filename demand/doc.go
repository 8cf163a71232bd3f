// Package demand carries measured demand from the request path to the
// controller (docs/controller.md): the ext_proc service counts, per (source, model,
// priority), the requests it decides, their estimated token cost and how
// many it shed ([Meter]); a [Reporter] sends those counts as Envoy Load
// Reporting Service (envoy.service.load_stats.v3) reports — over gRPC to
// the control plane's LRS server ([Server]) or, in the all-in-one
// process, straight to the [Aggregator] through the same encoding — and
// the aggregator turns them into rates for the controller each tick.
//
// ILB's reports use one ClusterStats named "ilb.demand" whose localities
// are (region: source, zone: model, sub_zone: priority); Envoy's own load
// reports (per engine cluster, from its cluster_manager.load_stats_config)
// are accepted too and kept as observed request rates per (source, engine
// cluster).
//
// Reports are untrusted: every entry is checked before any is summed
// (finite, non-negative, within extproc.max_report_rate over the interval
// a report is believed to cover, token cost within that rate times the
// model's largest request, known names), refused entries are counted and
// explained, sums saturate, and an [Authorizer] may restrict which
// sources a peer reports for. A demand reporter silent for more than
// three report intervals is forgotten; the demand goes stale only when
// every reporter is gone. docs/controller.md states the rules.
package demand
