// Package routetable plans a source's route table once: what Envoy does
// with a request ILB decided (the cluster or the model it names), with a
// client's model hint when ILB could not decide, and with everything else,
// and which answers Envoy makes itself (a fail-closed source without a
// decision, a cell without capacity, a path not served). ILB's own
// listener (package xds, RDS) and the Istio VirtualService (package istio)
// render the same plan, each in its own vocabulary, so the two cannot
// disagree on what a request gets.
package routetable
