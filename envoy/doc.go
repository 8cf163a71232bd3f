// Package envoy holds what ILB knows about Envoy's configuration as data:
// strict decoding of Envoy YAML into go-control-plane's protos
// ([DecodeYAML]), recursive validation into every Any ([Validate]), and
// the bootstrap ILB renders per source. The sub-package envoysim is a Go
// model of the Envoy behaviour ILB relies on.
package envoy
