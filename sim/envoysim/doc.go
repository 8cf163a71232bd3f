// Package envoysim is a Go model of the part of Envoy that ILB relies on,
// for local demo runs and end-to-end tests where no Envoy binary can be
// installed. It is a real data plane: an ADS client of a real xDS server over
// gRPC, real HTTP listeners, real ext_proc gRPC streams and real proxying to
// upstream HTTP servers.
//
// envoysim behaves like Envoy for every rule it models, and refuses every
// configuration field that would change behaviour it does not model: New
// and LoadBootstrap report such fields in the bootstrap, and an xDS resource
// using one is NACKed with an error naming the field. Tests therefore never
// pass on ignored behaviour. The authoritative list of accepted fields is in
// policy.go: "modelled" fields are interpreted, "ignored" fields are purely
// informational and accepted; any other populated field is refused.
//
// # xDS
//
// State-of-the-world aggregated discovery over gRPC (ads_config api_type
// GRPC, transport V3; DELTA_GRPC is refused) to a STATIC or STRICT_DNS
// bootstrap cluster configured for HTTP/2, dialled as h2c gRPC, or over
// the cluster's TLS transport socket (see TLS below).
// cds_config and lds_config must be "ads: {}". envoysim subscribes to CDS
// and LDS (wildcard), to EDS for every EDS cluster's service name and to RDS
// for every route_config_name; it ACKs with version_info and response_nonce
// and NACKs with error_detail and the previous version. As Envoy's
// subscriptions do, valid resources of a NACKed response are applied and the
// invalid ones keep their previous version. The stream reconnects with
// jittered exponential back-off (500 ms to 30 s) and the configuration is
// kept meanwhile. Every accepted change builds an immutable snapshot that is
// swapped atomically; requests in flight keep the snapshot they started
// with. https://www.envoyproxy.io/docs/envoy/latest/api-docs/xds_protocol
//
// # Clusters
//
// Types STATIC, STRICT_DNS and LOGICAL_DNS (resolved with net.Resolver per
// dns_lookup_family, refreshed every dns_refresh_rate) and EDS (priority 0
// only). lb_policy ROUND_ROBIN (seeded index; EDF scheduling when weights
// differ) and LEAST_REQUEST (choice_count random samples, fewest active
// requests; weight/(active+1) EDF when weights differ). EDS health:
// UNKNOWN/HEALTHY healthy, DEGRADED degraded, UNHEALTHY/TIMEOUT unhealthy,
// DRAINING excluded; the load split between healthy and degraded hosts, the
// overprovisioning factor and panic mode (common_lb_config
// healthy_panic_threshold, default 50%) follow LoadBalancerBase. Upstreams
// speak HTTP/1.1, or prior-knowledge HTTP/2 when the cluster's
// HttpProtocolOptions select http2_protocol_options.
// https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/upstream/load_balancing/load_balancing
//
// Typed load balancing policies (Cluster.load_balancing_policy;
// ClusterInfoImpl::configureLbPolicies, upstream_impl.cc): when it is set
// (or lb_policy is LOAD_BALANCING_POLICY_CONFIG) lb_policy and the legacy
// least_request_lb_config / round_robin_lb_config are ignored, as in Envoy
// (so a slow start configured there no longer applies), and
// common_lb_config's zone aware, locality weighted and consistent hashing
// parts are refused. The first policy of a type Envoy has a load balancer
// factory for is used; entries of other types are skipped; none is an error
// listing the names. Modelled: envoy.load_balancing_policies.least_request
// (choice_count, slow_start_config) and round_robin (slow_start_config),
// the same balancers as the enum, with common_lb_config's panic threshold;
// and envoy.load_balancing_policies.override_host
// (source/extensions/load_balancing_policies/override_host/load_balancer.cc)
// with a least_request or round_robin fallback_policy: at a request's first
// pick its override_host_sources are read in order (a header's first value;
// a dynamic metadata key's string value), each split on "," with ASCII
// whitespace trimmed and empty parts dropped, and the concatenated list is
// kept for the request (OverrideHostFilterState). Every pick, the first
// try and each retry, consumes the next entries until one is, as a string,
// the address ("ip:port", "[v6]:port") of any host of the cluster (the
// cross-priority host map): health, exclusion (draining) and panic are not
// consulted, and retry host predicates and host_selection_retry_max_attempts
// do not apply to entries; an entry naming no host, or unparseable, is
// skipped; an empty or exhausted list leaves the pick to the fallback
// policy with all its rules.
// selected_host_key writes the address of every host picked, override or
// fallback, into the request's dynamic metadata (a Struct nested along the
// path, merged into the namespace). The gRPC clients' picks (ADS, ext_proc)
// see their initial_metadata as request headers and a dynamic metadata of
// their own. Each source sets exactly one of header and metadata ("Empty
// override source", "Only one override source must be set"); metadata path
// index segments, locality configuration, active_request_bias, full scans
// and every other load balancing policy type are refused, with the list of
// supported ones, wherever they are listed (Envoy would not look past the
// policy it uses); a typed_config of a type unknown to the Go registry is
// refused by validation where Envoy would skip it.
//
// Slow start (least_request_lb_config or round_robin_lb_config
// slow_start_config; EdfLoadBalancerBase): a host that became healthy (its
// last health check pass, or when it joined without health checking) less
// than slow_start_window ago has its weight scaled by
// max((elapsed/window)^(1/aggression), min_weight_percent); while any host is
// in its window the EDF scheduler is used even with equal weights.
// aggression is its default_value (no runtime layer).
//
// Active health checking (one health_checks entry; source/extensions/
// health_checkers): http_health_check (method, path, host, expected and
// retriable statuses, request headers, HTTP/1.1 or codec_client_type HTTP2,
// user-agent Envoy/HC, x-envoy-degraded and
// x-envoy-immediate-health-check-fail) and grpc_health_check
// (grpc.health.v1.Health/Check over HTTP/2, SERVING is healthy; the cluster
// must be HTTP/2). Each host is probed at once, then every interval
// (unhealthy_interval and the edge intervals, no_traffic_interval (60 s) and
// no_traffic_healthy_interval until the cluster made a connection). The
// first result decides at once; then healthy_threshold successes; an
// unexpected status or non-SERVING answer fails a host at once, network
// failures and timeouts need unhealthy_threshold. With EDS, a host is
// healthy only when both EDS and its checks say so; a host added while
// checks run starts failing them (FAILED_ACTIVE_HC) until its first check,
// and with ignore_new_hosts_until_first_hc is also excluded from the load
// computation; a host removed from EDS while passing its checks stays
// (PENDING_DYNAMIC_REMOVAL) until it fails one, unless
// ignore_health_on_host_removal. A cluster is initialized (published, and
// WaitReady) once every initial host got its first result.
//
// Outlier detection (split_external_local_origin_errors false;
// outlier_detection_impl.cc): consecutive_5xx (every 5xx and locally
// originated failure) and consecutive_gateway_failure (502, 503, 504,
// connect failures and resets), success rate and failure percentage on the
// interval, each subject to its enforcing percentage; max_ejection_percent
// (and always_eject_one_host); ejection for
// min(base_ejection_time × backoff, max_ejection_time) + jitter, unejection
// on the interval timer, or by a passing health check
// (successful_active_health_check_uneject_host). Ejected hosts are unhealthy.
//
// Circuit breakers (the DEFAULT priority threshold): max_requests and
// max_pending_requests as the connection pool checks them, overflow answered
// 503 "upstream connect error or disconnect/reset before headers. reset
// reason: overflow" with x-envoy-overloaded: true; max_retries, or the
// retry_budget (max(budget_percent × (active + pending), min_retry_concurrency)).
//
// Router failures: no host → 503 "no healthy upstream"; connect failure → 503
// "upstream connect error or disconnect/reset before headers. reset reason:
// connection failure" ("retried and the latest reset reason" after a retry);
// route timeout (default 15 s, 0 disables, spanning the whole exchange
// including retries) → 504 "upstream request timeout" before response
// headers and a stream reset after them; idle timeout (the route's
// idle_timeout, else stream_idle_timeout) → "stream timeout", 504 when the
// request was received and 408 otherwise, or a stream reset after response
// headers.
//
// # TLS to upstreams
//
// A cluster's transport_socket envoy.transport_sockets.tls with an
// UpstreamTlsContext (client_context_impl.cc, default_validator.cc) is
// honoured by every client of the cluster: the xDS and ext_proc gRPC
// clients, the health checker and the router's pool. Modelled: one
// client certificate (tls_certificates: certificate_chain and private_key
// from a file or inline, read once at load as Envoy reads static
// material), validation_context.trusted_ca (the server's chain must verify
// against it; without a validation context the server is not verified at
// all), match_typed_subject_alt_names (DNS, URI, IP_ADDRESS, EMAIL; any
// matcher matching any SAN of its type passes; an exact DNS matcher
// accepts a wildcard SAN of one label, Utility::dnsNameMatch; matchers
// without trusted_ca are refused, as Envoy refuses them), sni,
// alpn_protocols (empty on an HTTP/2 cluster: h2, the HTTP/2 pool's ALPN
// fallback), tls_params minimum and maximum versions (TLSv1_2 and
// TLSv1_3; default TLSv1_2 for both, Envoy's client default). The codec is
// the cluster's (HTTP/2 needs no ALPN agreement). The handshake is part of
// the connection: a failure is a connection failure (gRPC streams fail
// with Unavailable and the client retries with back-off; ext_proc applies
// its failure mode; a health check fails as a network failure; the router
// answers "connection failure"). Stats per cluster: ssl.handshake,
// ssl.connection_error, ssl.fail_verify_error, ssl.fail_verify_san.
// Refused: SDS secrets (tls_certificate_sds_secret_configs,
// validation_context_sds_secret_config, combined_validation_context),
// certificate providers, CRLs, SPKI and hash pinning, system root certs,
// allow_expired_certificate, trust_chain_verification, custom validators
// and handshakers, cipher suites, curves and signature algorithms,
// auto_host_sni and auto_sni_san_validation, session resumption and
// renegotiation settings other than max_session_keys (ignored), more than
// one certificate, TLS on listeners (downstream).
// https://www.envoyproxy.io/docs/envoy/latest/api-v3/extensions/transport_sockets/tls/v3/tls.proto
//
// # Retries
//
// RouteAction.retry_policy (RetryStateImpl and router.cc): retry_on 5xx,
// gateway-error, connect-failure, reset, retriable-4xx,
// retriable-status-codes and envoy-ratelimited; num_retries (default 1);
// per_try_timeout until response headers; retries happen only before any
// response byte went downstream, a retried response is reset. The request
// body is kept for replay up to the listener's
// per_connection_buffer_limit_bytes, beyond which retries are abandoned.
// previous_hosts with host_selection_retry_max_attempts re-picks. Back-off:
// random % interval, the interval doubling from base_interval (25 ms) to
// max_interval (10 × base); rate_limited_retry_back_off reset headers
// (SECONDS, UNIX_TIMESTAMP) at most max_interval (300 s default; longer ones
// are ignored) give a wait in [d, 1.5 d). Retries hold the circuit
// breaker's retry resource. The waits go through Options.RetrySleep.
// https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/http/http_routing#retry-semantics
//
// # Listeners and the HTTP connection manager
//
// One socket address (port 0 binds an ephemeral port, see
// [Envoy.ListenerAddr]), one filter chain holding one
// http_connection_manager, per_connection_buffer_limit_bytes (default 1 MiB).
// codec_type AUTO (HTTP/1.1 and h2c), HTTP1 or HTTP2. Before the filters,
// in Envoy's order (ActiveStream::decodeHeaders): path normalisation
// (ConnectionManagerUtility::maybeNormalizePath, path_normalize.go). A :path
// holding '#' is refused whatever the configuration
// (http_reject_path_with_fragment). path_with_escaped_slashes_action
// (IMPLEMENTATION_SPECIFIC_DEFAULT is KEEP_UNCHANGED) decodes %2F/%2f to '/'
// and %5C/%5c to '\' in the path before '?' (PathUtil::unescapeSlashes);
// when one was found REJECT_REQUEST refuses, UNESCAPE_AND_REDIRECT
// redirects once the steps below are done, UNESCAPE_AND_FORWARD goes on.
// normalize_path (default false) is PathUtil::canonicalPath: path
// parameters are stripped from "." and ".." segments
// (strip_dotdot_segments_with_parameters), then googleurl's
// CanonicalizePath runs on the path before '?': escapes of unreserved
// characters decoded, other escapes kept as written, '\' read as '/', "."
// and ".." segments (also %2e) resolved without climbing above the root,
// space, '"', '<', '>', '^', '`', '{', '|', '}', control bytes and bytes >=
// 0x80 escaped, a NUL (raw or %00) refused. merge_slashes, independent of
// normalize_path, merges runs of '/' before '?'. The query is never
// changed. A refused path is answered 400 with no body, a redirect 307
// with location set to the normalised :path (400 for a gRPC content-type),
// both with response code details path_normalization_failed, before any
// filter or route sees the request (local_reply_config applies). Then
// early_header_mutation_extensions (remove, remove_on_match, append), then
// ConnectionManagerUtility::mutateRequestHeaders (hop-by-hop headers,
// x-forwarded-for/proto with use_remote_address, :scheme, removal of
// internal x-envoy-* headers and internal_only_headers, via,
// x-envoy-external-address, x-request-id generation, x-forwarded-client-cert
// removal) and host normalisation (strip_trailing_host_dot,
// strip_any_host_port, strip_matching_host_port). HTTP filters: any number of
// envoy.filters.http.ext_proc and envoy.filters.http.header_mutation
// (request and response mutations: remove, remove_on_match, append; it
// computes the route on the request path), followed by the terminal router.
// Local replies go through every filter's response path.
// https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_conn_man/http_conn_man
//
// # Routing
//
// Virtual hosts by authority (exact, "*suffix" and "prefix*" wildcards
// longest first, "*"; ignore_port_in_host_matching); routes in order on
// prefix, path, safe_regex (RE2 with Go's regexp) or path_separated_prefix,
// case_sensitive, header matchers (HeaderUtility semantics) and grpc. The
// route is computed when the first ext_proc filter starts (or at the router)
// and cached; it is recomputed only after an ext_proc response with a
// header_mutation clears the cache (route_cache_action). Actions: cluster,
// cluster_header, weighted_clusters (header_name draws), direct_response,
// cluster_not_found_response_code, timeout, idle_timeout, retry_policy,
// prefix_rewrite,
// host_rewrite_literal; request/response headers to add and remove at every
// level with Envoy's order and append actions; header values with
// %UPSTREAM_HOST%, %UPSTREAM_CLUSTER%, %REQ(name)% and "%%" (any other
// operator is refused); ExtProcPerRoute, merged from the route
// configuration to the weighted cluster entry (FilterConfigPerRoute):
// disabled, or overrides of the processing mode, the gRPC service, its
// initial metadata, the metadata namespaces and failure_mode_allow.
// https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/http/http_routing
//
// # ext_proc
//
// One gRPC stream per request, opened on the first message to a host of the
// grpc_service.envoy_grpc cluster, with initial_metadata as gRPC metadata;
// a stream that finds the host's connection failed connects again at
// once (Envoy's connection pool keeps no back-off between attempts).
// Modes: header modes DEFAULT/SEND/SKIP, body modes NONE, BUFFERED and
// FULL_DUPLEX_STREAMED, STREAMED for response bodies, trailer modes
// DEFAULT/SKIP (and SEND with a full-duplex body, which Envoy requires;
// fail-open is refused with it, as config.cc does). A STREAMED response
// body (configured, per route, or from a mode_override in the answer to
// the response headers; ext_proc.cc handleDataStreamedModeBase,
// processor_state.cc handleStreamedBodyResponse): every data frame of the
// response goes as a response_body message under message_timeout and
// reaches the client with its answer, flushed frame by frame (server-sent
// events flow as produced); an HTTP/1 upstream's body ends with an empty
// end_of_stream message (its codec's message-complete frame), a local
// reply's is one message with end_of_stream, and with trailers following
// no message has end_of_stream and no trailers message goes; a
// body_mutation replaces or clears the frame, a header_mutation or
// CONTINUE_AND_REPLACE in the answer is ignored and a streamed_response is
// spurious; the answer to the end_of_stream frame closes the stream
// (closeGraceful). When processing ends and the filter goes on
// (failure_mode_allow, the server closing the stream) the frame awaiting
// its answer and the rest of the body flow untouched; a failure that would
// send a local reply resets the stream instead, the response headers being
// gone (DownstreamFilterManager::sendLocalReply). content-length is removed
// only when STREAMED was in force at the response headers (encodeHeaders'
// shouldRemoveContentLength), so a mode_override to STREAMED keeps the
// upstream's, and skips a content-length its own header mutation sets.
// FULL_DUPLEX_STREAMED (ext_proc.cc
// handleDataStreamedModeBase, processor_state.cc): the headers message,
// then every body chunk as it arrives without waiting; no message timer
// runs; the headers' answer must come first; when the whole body had
// arrived by then the headers wait for the body's answers, otherwise they
// go on at once; every body answer must be a streamed_response (anything
// else is spurious) whose bytes become the body the next filter, the
// router or the client gets, its end_of_stream ending it; content-length
// is removed; server-sent events flow chunk by chunk. Messages carry every
// header (pseudo headers included)
// with raw_value, end_of_stream, protocol_config on the first one. Each wait
// is bounded by message_timeout (override_message_timeout honoured up to
// max_message_timeout). Header mutations read raw_value only, apply the
// mutation rules (HeaderMutationRules), and may clear the route cache; body
// mutations must match content-length; mode_override is honoured on headers
// responses when allow_mode_override (and allowed_override_modes) permit.
// Failures follow ext_proc.cc: gRPC errors and spurious messages give
// status_on_error (default 500) or continue with failure_mode_allow; a
// message timeout gives 504 or continues; a mutation error always gives
// status_on_error. ImmediateResponse becomes a local reply. Dynamic
// metadata (metadata_options; Filter::setDynamicMetadata and
// addDynamicMetadata): a response's dynamic_metadata is merged, top-level
// key by top-level key, into the namespaces of the stream's dynamic
// metadata that receiving_namespaces.untyped lists (others are dropped;
// none listed, nothing is written), for every headers, body or trailers
// response, before it is checked to be the expected one, and for an
// immediate response unless disable_immediate_response; the router's host
// pick reads that metadata. Every message sent carries metadata_context:
// a copy of each forwarding_namespaces.untyped namespace the stream has
// (typed namespaces find nothing: nothing envoysim models writes typed or
// connection metadata), so the response headers message shows what the
// load balancer wrote with selected_host_key. Local replies
// sent while decoding go through every ext_proc filter's response path, as
// in Envoy's filter manager. The connection manager's local_reply_config
// rewrites them (LocalReplyImpl::rewrite, after the route's and the
// filter's header changes; the first matching mapper wins): mappers with a
// status_code_filter, status_code, an inline body, a body_format_override
// of text with %LOCAL_REPLY_BODY% and its content_type, and
// headers_to_add; other filters, formatters and a top-level body_format
// are refused. A response sent before the request was complete closes an
// HTTP/1.1 connection with "connection: close" (ActiveStream::
// encodeHeaders); a body that arrived with its headers completes it.
// https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_filters/ext_proc_filter
//
// # Refused
//
// Among others: listener_filters, filter_chain_match, more than one filter
// chain, downstream TLS transport sockets, HTTP filters other than ext_proc,
// header_mutation and router, per-route HeaderMutationPerRoute and the
// filter's query parameter and trailer mutations, scoped routes, VHDS,
// query_parameters and other route matchers, virtual host retry_policy, retry
// priorities, retriable headers, hedging, per_try_idle_timeout, redirects,
// mirrors, rate limits, CORS, hash-based and subset load balancing, typed
// load balancing policies other than override_host, least_request and
// round_robin, ext_proc cluster_metadata_forwarding_namespaces,
// active_request_bias, TCP and custom health checks, health check jitter and
// payloads, endpoint health_check_config, the local origin split of outlier
// detection, per-host circuit breakers, priorities other than 0, ext_proc
// STREAMED request bodies and BUFFERED_PARTIAL bodies, trailer SEND modes without a
// full-duplex body, a mode_override to or from FULL_DUPLEX_STREAMED,
// CONTINUE_AND_REPLACE (an error response), observability mode,
// forward_rules, request/response attributes, request_timeout other than 0,
// path_normalization_options, typed_header_validation_config (UHV),
// layered runtime, header_prefix.
//
// # Ignored
//
// Informational fields only: names, stat prefixes, stats configuration,
// access logs, tracing, metadata, admin, overload manager, watchdogs, DNS
// resolver tuning, connection pool and HTTP/1 and HTTP/2 codec tuning,
// grpc_service.timeout, health check event logging, circuit breaker
// track_remaining. See policy.go for the full list.
//
// # Not modelled, although accepted
//
// Path normalisation's two stats are counted as
// LocalReplies["path_normalization_failed"] only; it runs before the early
// header mutations (the relative order is not verified against Envoy).
//
// Timing details: the route and per try timeouts start when the router (or
// the attempt) starts rather than at the end of the downstream request; the
// stream idle timeout only runs from the router on; a 413 is sent once the
// body is read after the headers response rather than while it arrives. The
// downstream body is read as upstream attempts consume it, so "received" (504
// vs 408 on idle timeout) means read by an attempt, and Envoy's 507 (buffer
// limit exceeded during a retry back-off) cannot occur. max_connections is
// accepted but not enforced; whether the pool has a ready connection (which
// decides between the requests and pending limits) is estimated from the open
// connections. Circuit breakers and outlier detection apply to proxied
// requests, not to ext_proc streams (which do use the cluster's health and
// panic mode). Health check probe timeouts use real time; an HTTP health
// check does not reuse a connection after a timeout; the outlier detector
// acts synchronously where Envoy posts to its main thread;
// PENDING_DYNAMIC_REMOVAL hosts of DNS clusters leave at the next rebuild
// after failing a check rather than at the next resolution. Envoy's EDF
// scheduler pre-picks a random number of entries; envoysim does not. envoysim
// paces repeated NACKs of the same version (up to 5 s) so that a control
// plane that resends a rejected snapshot does not spin. Response trailers are
// forwarded to HTTP/2 clients only. gRPC-specific local replies (grpc-status)
// are not generated. Trailers do not go through ext_proc: a full-duplex
// request or response carrying trailers under trailer mode SEND is reset
// (ExtProcStats.UnmodelledTrailers). When a full-duplex exchange fails
// after the headers went on (the processor answered them before the body
// ended), the body being forwarded fails and the router treats it as an
// upstream failure where Envoy sends status_on_error; request body
// messages sent then carry the metadata as it was, and a clear_route_cache
// in their answers is not applied (the route is already used). A STREAMED
// response body is exchanged frame by frame (send, answer, forward) where
// Envoy pipelines the frames: the processor never gets frame N+1 before it
// answered frame N (an HTTP/1 end frame that came with the last data goes
// with it), and each frame's timer runs from its own send. Body
// bytes that arrive while the response headers' answer is awaited are not
// read meanwhile (Envoy holds them and sends them as one frame, as one
// end_of_stream message when the whole body came): envoysim reads them as
// its next frame and ends an HTTP/1 body with its empty end_of_stream
// message as always; an HTTP/2 upstream's END_STREAM is only seen as an
// empty read of its own, so that body also ends with an empty
// end_of_stream message. A failure while a later filter still holds the
// response headers resets the stream rather than replying.
package envoysim
