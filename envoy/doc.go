// Package envoy holds what ILB knows about Envoy's configuration as data:
// strict decoding of Envoy YAML into go-control-plane's protos
// ([DecodeYAML]), recursive validation into every Any ([Validate]), the
// bootstrap ILB renders per source, and the pieces of the wire contract
// between Envoy and ILB's ext_proc that ILB's listener and the Istio
// output share (the ext_proc filter, path normalisation, the local reply
// mapper). Package sim/envoysim is a Go model of the Envoy behaviour ILB
// relies on.
package envoy
