// Package openai holds the pieces of the OpenAI HTTP API's wire format
// that ILB writes itself: the error body every refusal carries, whether
// ext_proc answers it (an ImmediateResponse), a route answers it directly
// (ILB's own route table and the Istio VirtualService) or Envoy's local
// reply mapper rewrites one of its own. One writer, so that a client gets
// one shape whichever part of the path refused it.
package openai
