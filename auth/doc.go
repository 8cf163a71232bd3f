// Package auth is ILB's transport security: the TLS material of its
// ports, reloaded from files when they change; the identity of a peer
// from its verified client certificate; an authorizer per gRPC port
// (xDS, LRS, ext_proc) that lets a peer speak only for the sources the
// configuration's peer rules give its identity; the admin API's bearer
// token; and a development CA that makes the certificates of a test or
// demo setup (`ilb certs`).
//
// What ILB trusts, per port, with security.tls and a client CA set:
//
//   - xDS (ADS) and LRS: the peer's certificate, verified against the
//     client CA, names an identity (its SPIFFE ID, else its DNS SANs,
//     else its subject CN); the node's source (node.cluster) must be one
//     that identity may speak for.
//   - ext_proc: the same check for the source in the stream's
//     x-ilb-source metadata, once per stream (a cached lookup).
//   - admin: TLS with the same certificate (security.admin.tls), client
//     certificates (security.admin.client_certs) and/or a bearer token
//     (security.admin.token_file) on every path but /healthz.
//
// Every refusal is a gRPC status (Unauthenticated without a verified
// identity, PermissionDenied otherwise) or an HTTP 401, counted in
// ilb_auth_refusals_total{port,reason} and logged at most once a minute
// per port, identity and source.
package auth
