// Package openai holds the pieces of the OpenAI HTTP API's wire format
// that ILB reads and writes itself. It reads request bodies: ParseBody
// takes a body in one pass with encoding/json's rules and errors, decoding
// only the fields ILB routes on and measuring the prompt without copying
// it (a refusal is a *RequestError naming the field). It writes the error
// body every refusal carries, whether ext_proc answers it (an
// ImmediateResponse), a route answers it directly (ILB's own route table
// and the Istio VirtualService) or Envoy's local reply mapper rewrites one
// of its own: one writer, so that a client gets one shape whichever part
// of the path refused it. Its functions are pure and safe for concurrent
// use.
package openai
