package envoysim

import (
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// fieldRule says what envoysim does with a populated configuration field.
type fieldRule uint8

const (
	// ruleModelled fields are interpreted; nested messages are checked too.
	ruleModelled fieldRule = iota + 1
	// ruleIgnored fields are purely informational (names, stats, logs, tuning
	// that cannot change what a test observes); they are accepted and skipped.
	ruleIgnored
)

// fieldPolicy lists, per message type, the fields envoysim accepts. Any other
// populated field is refused, so that a configuration relying on behaviour
// envoysim does not model is rejected (NACKed) instead of silently ignored.
// The tables below are the authoritative list of what is modelled and what is
// ignored; doc.go summarises them.
type fieldPolicy map[protoreflect.FullName]map[protoreflect.Name]fieldRule

func (p fieldPolicy) allow(msg string, rule fieldRule, fields ...string) {
	m := p[protoreflect.FullName(msg)]
	if m == nil {
		m = map[protoreflect.Name]fieldRule{}
		p[protoreflect.FullName(msg)] = m
	}
	for _, f := range fields {
		m[protoreflect.Name(f)] = rule
	}
}

// check reports every populated field of msg, recursively and into every Any,
// that the policy does not accept, each prefixed with its path.
func (p fieldPolicy) check(msg proto.Message, path string) error {
	var errs []error
	p.walk(msg.ProtoReflect(), path, &errs)
	return errors.Join(errs...)
}

func (p fieldPolicy) walk(m protoreflect.Message, path string, errs *[]error) {
	name := m.Descriptor().FullName()
	if a, ok := m.Interface().(*anypb.Any); ok {
		inner, err := a.UnmarshalNew()
		if err != nil {
			*errs = append(*errs, fmt.Errorf("%s: cannot unpack %q: %w", path, a.GetTypeUrl(), err))
			return
		}
		p.walk(inner.ProtoReflect(), fmt.Sprintf("%s(%s)", path, inner.ProtoReflect().Descriptor().Name()), errs)
		return
	}
	if strings.HasPrefix(string(name), "google.protobuf.") {
		return // well-known leaf types: Duration, wrappers, Struct, Empty
	}
	rules, ok := p[name]
	if !ok {
		*errs = append(*errs, fmt.Errorf("%s: type %s is not supported by envoysim%s", path, name, unsupportedTypeHint(name)))
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		fpath := path + "." + string(fd.Name())
		switch rules[fd.Name()] {
		case ruleIgnored:
			return true
		case ruleModelled:
		default:
			*errs = append(*errs, fmt.Errorf("%s: field not supported by envoysim (the behaviour it configures is not modelled)", fpath))
			return true
		}
		if fd.Message() == nil {
			return true
		}
		switch {
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				p.walk(l.Get(i).Message(), fmt.Sprintf("%s[%d]", fpath, i), errs)
			}
		case fd.IsMap():
			if fd.MapValue().Message() == nil {
				return true
			}
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				p.walk(mv.Message(), fmt.Sprintf("%s[%v]", fpath, k.Interface()), errs)
				return true
			})
		default:
			p.walk(v.Message(), fpath, errs)
		}
		return true
	})
}

// newFieldPolicy returns the policy of this version of envoysim.
func newFieldPolicy() fieldPolicy {
	p := fieldPolicy{}
	mod := func(msg string, fields ...string) { p.allow(msg, ruleModelled, fields...) }
	ign := func(msg string, fields ...string) { p.allow(msg, ruleIgnored, fields...) }

	// Bootstrap.
	mod("envoy.config.bootstrap.v3.Bootstrap", "node", "static_resources", "dynamic_resources")
	ign("envoy.config.bootstrap.v3.Bootstrap", "admin", "stats_config", "stats_sinks", "stats_flush_interval",
		"stats_flush_on_admin", "stats_eviction_interval", "deferred_stat_options", "stats_server_version_override",
		"node_context_params", "watchdog", "watchdogs", "tracing", "overload_manager", "enable_dispatcher_stats",
		"fatal_actions", "application_log_config", "memory_allocator_manager", "enable_worker_cpu_affinity",
		"use_tcp_for_dns_lookups", "dns_resolution_config", "typed_dns_resolver_config", "inline_headers",
		"perf_tracing_file_path", "grpc_async_client_manager_config", "default_socket_interface", "flags_path",
		"default_regex_engine", "xds_config_tracker_extension", "cluster_manager")
	mod("envoy.config.core.v3.Node", "id", "cluster")
	ign("envoy.config.core.v3.Node", "metadata", "dynamic_parameters", "locality", "user_agent_name",
		"user_agent_version", "user_agent_build_version", "extensions", "client_features", "listening_addresses")
	mod("envoy.config.bootstrap.v3.Bootstrap.DynamicResources", "lds_config", "cds_config", "ads_config")
	mod("envoy.config.bootstrap.v3.Bootstrap.StaticResources", "listeners", "clusters")
	mod("envoy.config.core.v3.ApiConfigSource", "api_type", "transport_api_version", "grpc_services",
		"set_node_on_first_message_only")
	ign("envoy.config.core.v3.ApiConfigSource", "refresh_delay", "request_timeout", "rate_limit_settings")
	mod("envoy.config.core.v3.GrpcService", "envoy_grpc", "initial_metadata", "retry_policy")
	mod("envoy.config.core.v3.RetryPolicy", "retry_back_off", "num_retries", "retry_on", "retry_host_predicate",
		"host_selection_retry_max_attempts")
	mod("envoy.config.core.v3.RetryPolicy.RetryHostPredicate", "name", "typed_config")
	mod("envoy.config.core.v3.BackoffStrategy", "base_interval", "max_interval")
	ign("envoy.config.core.v3.GrpcService", "timeout")
	mod("envoy.config.core.v3.GrpcService.EnvoyGrpc", "cluster_name", "retry_policy")
	ign("envoy.config.core.v3.GrpcService.EnvoyGrpc", "max_receive_message_length", "skip_envoy_headers")
	mod("envoy.config.core.v3.ConfigSource", "ads", "resource_api_version")
	ign("envoy.config.core.v3.ConfigSource", "initial_fetch_timeout")
	mod("envoy.config.core.v3.AggregatedConfigSource")
	mod("envoy.config.core.v3.HeaderValue", "key", "value")
	mod("envoy.config.core.v3.HeaderValueOption", "header", "append", "append_action", "keep_empty_value")
	mod("envoy.config.core.v3.Address", "socket_address")
	mod("envoy.config.core.v3.SocketAddress", "address", "port_value", "protocol")
	ign("envoy.config.core.v3.SocketAddress", "ipv4_compat")
	mod("envoy.config.core.v3.TransportSocket", "typed_config")
	ign("envoy.config.core.v3.TransportSocket", "name")
	mod("envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer")
	mod("envoy.config.core.v3.DataSource", "filename", "inline_bytes", "inline_string")

	// TLS to upstreams (tls.go): file or inline material; SDS, certificate
	// providers, CRLs, pinning, cipher and curve lists are refused.
	const tlsPkg = "envoy.extensions.transport_sockets.tls.v3."
	mod(tlsPkg+"UpstreamTlsContext", "common_tls_context", "sni")
	ign(tlsPkg+"UpstreamTlsContext", "max_session_keys")
	mod(tlsPkg+"CommonTlsContext", "tls_params", "tls_certificates", "validation_context", "alpn_protocols")
	mod(tlsPkg+"TlsParameters", "tls_minimum_protocol_version", "tls_maximum_protocol_version")
	mod(tlsPkg+"TlsCertificate", "certificate_chain", "private_key")
	mod(tlsPkg+"CertificateValidationContext", "trusted_ca", "match_typed_subject_alt_names")
	mod(tlsPkg+"SubjectAltNameMatcher", "san_type", "matcher")
	mod("envoy.type.v3.Percent", "value")
	mod("envoy.type.v3.HttpStatus", "code")
	mod("envoy.type.v3.Int64Range", "start", "end")
	mod("envoy.config.core.v3.TypedExtensionConfig", "typed_config")
	ign("envoy.config.core.v3.TypedExtensionConfig", "name")

	// Clusters and endpoints.
	mod("envoy.config.cluster.v3.Cluster", "name", "type", "eds_cluster_config", "connect_timeout", "lb_policy",
		"load_assignment", "typed_extension_protocol_options", "dns_lookup_family", "dns_refresh_rate",
		"least_request_lb_config", "round_robin_lb_config", "common_lb_config", "transport_socket",
		"http2_protocol_options", "health_checks", "outlier_detection", "circuit_breakers",
		"ignore_health_on_host_removal")
	ign("envoy.config.cluster.v3.Cluster", "alt_stat_name", "stats_matcher", "metadata", "track_cluster_stats",
		"per_connection_buffer_limit_bytes", "per_connection_buffer_high_watermark_timeout", "wait_for_warm_on_init",
		"cleanup_interval", "dns_jitter", "respect_dns_ttl", "dns_failure_refresh_rate", "dns_resolvers",
		"typed_dns_resolver_config", "dns_resolution_config", "use_tcp_for_dns_lookups", "upstream_connection_options",
		"close_connections_on_host_health_failure", "preconnect_policy",
		"connection_pool_per_downstream_connection", "max_requests_per_connection",
		"http_protocol_options", "upstream_http_protocol_options", "lrs_server", "lrs_report_endpoint_metrics",
		"track_timeout_budgets")
	allowLoadBalancingPolicies(mod) // load_balancing_policy and ext_proc metadata_options (override_host.go)
	mod("envoy.config.cluster.v3.Cluster.EdsClusterConfig", "eds_config", "service_name")
	mod("envoy.config.cluster.v3.Cluster.LeastRequestLbConfig", "choice_count", "slow_start_config")
	mod("envoy.config.cluster.v3.Cluster.RoundRobinLbConfig", "slow_start_config")
	mod("envoy.config.cluster.v3.Cluster.SlowStartConfig", "slow_start_window", "aggression", "min_weight_percent")
	mod("envoy.config.core.v3.RuntimeDouble", "default_value")
	ign("envoy.config.core.v3.RuntimeDouble", "runtime_key") // no runtime layer: default_value applies
	mod("envoy.config.cluster.v3.Cluster.CommonLbConfig", "healthy_panic_threshold", "ignore_new_hosts_until_first_hc")
	ign("envoy.config.cluster.v3.Cluster.CommonLbConfig", "update_merge_window",
		"close_connections_on_host_set_change", "consistent_hashing_lb_config")

	// Active health checking, outlier detection, circuit breakers.
	mod("envoy.config.core.v3.HealthCheck", "timeout", "interval", "unhealthy_threshold", "healthy_threshold",
		"reuse_connection", "http_health_check", "grpc_health_check", "no_traffic_interval",
		"no_traffic_healthy_interval", "unhealthy_interval", "unhealthy_edge_interval", "healthy_edge_interval")
	ign("envoy.config.core.v3.HealthCheck", "event_log_path", "event_logger", "event_service",
		"always_log_health_check_failures", "always_log_health_check_success")
	mod("envoy.config.core.v3.HealthCheck.HttpHealthCheck", "host", "path", "request_headers_to_add",
		"request_headers_to_remove", "expected_statuses", "retriable_statuses", "codec_client_type", "method")
	ign("envoy.config.core.v3.HealthCheck.HttpHealthCheck", "response_buffer_size") // only used with receive
	mod("envoy.config.core.v3.HealthCheck.GrpcHealthCheck", "service_name", "authority", "initial_metadata")
	mod("envoy.config.cluster.v3.OutlierDetection", "consecutive_5xx", "interval", "base_ejection_time",
		"max_ejection_percent", "enforcing_consecutive_5xx", "enforcing_success_rate", "success_rate_minimum_hosts",
		"success_rate_request_volume", "success_rate_stdev_factor", "consecutive_gateway_failure",
		"enforcing_consecutive_gateway_failure", "split_external_local_origin_errors",
		"failure_percentage_threshold", "enforcing_failure_percentage", "failure_percentage_minimum_hosts",
		"failure_percentage_request_volume", "max_ejection_time", "max_ejection_time_jitter",
		"successful_active_health_check_uneject_host", "always_eject_one_host")
	mod("envoy.config.cluster.v3.CircuitBreakers", "thresholds")
	mod("envoy.config.cluster.v3.CircuitBreakers.Thresholds", "priority", "max_connections", "max_pending_requests",
		"max_requests", "max_retries", "retry_budget")
	ign("envoy.config.cluster.v3.CircuitBreakers.Thresholds", "track_remaining")
	mod("envoy.config.cluster.v3.CircuitBreakers.Thresholds.RetryBudget", "budget_percent", "min_retry_concurrency")
	mod("envoy.config.endpoint.v3.ClusterLoadAssignment", "endpoints", "policy")
	ign("envoy.config.endpoint.v3.ClusterLoadAssignment", "cluster_name")
	mod("envoy.config.endpoint.v3.ClusterLoadAssignment.Policy", "overprovisioning_factor")
	ign("envoy.config.endpoint.v3.ClusterLoadAssignment.Policy", "endpoint_stale_after")
	mod("envoy.config.endpoint.v3.LocalityLbEndpoints", "lb_endpoints", "priority")
	ign("envoy.config.endpoint.v3.LocalityLbEndpoints", "locality", "metadata", "load_balancing_weight", "proximity")
	mod("envoy.config.endpoint.v3.LbEndpoint", "endpoint", "health_status", "load_balancing_weight")
	ign("envoy.config.endpoint.v3.LbEndpoint", "metadata")
	mod("envoy.config.endpoint.v3.Endpoint", "address")
	ign("envoy.config.endpoint.v3.Endpoint", "hostname", "observability_name")
	mod("envoy.extensions.upstreams.http.v3.HttpProtocolOptions", "explicit_http_config",
		"common_http_protocol_options", "local_reply_config")
	ign("envoy.extensions.upstreams.http.v3.HttpProtocolOptions", "upstream_http_protocol_options")
	mod("envoy.extensions.upstreams.http.v3.HttpProtocolOptions.ExplicitHttpConfig", "http_protocol_options",
		"http2_protocol_options")
	mod("envoy.config.core.v3.Http1ProtocolOptions")
	ign("envoy.config.core.v3.Http1ProtocolOptions", "allow_absolute_url", "accept_http_10", "default_host_for_http_10",
		"header_key_format", "enable_trailers", "allow_chunked_length", "override_stream_error_on_invalid_http_message",
		"send_fully_qualified_url", "use_balsa_parser", "allow_custom_methods", "ignore_http_11_upgrade")
	mod("envoy.config.core.v3.Http2ProtocolOptions")
	ign("envoy.config.core.v3.Http2ProtocolOptions", "hpack_table_size", "max_concurrent_streams",
		"initial_stream_window_size", "initial_connection_window_size", "allow_connect", "allow_metadata",
		"max_outbound_frames", "max_outbound_control_frames", "max_consecutive_inbound_frames_with_empty_payload",
		"max_inbound_priority_frames_per_stream", "max_inbound_window_update_frames_per_data_frame_sent",
		"stream_error_on_invalid_http_messaging", "override_stream_error_on_invalid_http_message",
		"custom_settings_parameters", "connection_keepalive", "use_oghttp2_codec", "max_metadata_size",
		"enable_huffman_encoding", "max_header_field_size_kb", "disallow_obs_text", "stream_reset_burst",
		"stream_reset_rate")
	mod("envoy.config.core.v3.HttpProtocolOptions")
	ign("envoy.config.core.v3.HttpProtocolOptions", "idle_timeout", "max_connection_duration", "max_headers_count",
		"max_response_headers_kb", "max_requests_per_connection")

	// Listeners and the HTTP connection manager.
	mod("envoy.config.listener.v3.Listener", "name", "address", "filter_chains", "per_connection_buffer_limit_bytes",
		"bind_to_port")
	ign("envoy.config.listener.v3.Listener", "stat_prefix", "stats_matcher", "metadata", "access_log",
		"traffic_direction", "drain_type", "listener_filters_timeout", "continue_on_listener_filters_timeout",
		"enable_reuse_port", "reuse_port", "tcp_backlog_size", "connection_balance_config",
		"max_connections_to_accept_per_socket_event", "ignore_global_conn_limit", "bypass_overload_manager",
		"tcp_keepalive", "per_connection_buffer_high_watermark_timeout", "deprecated_v1", "enable_mptcp")
	mod("envoy.config.listener.v3.FilterChain", "filters", "transport_socket")
	ign("envoy.config.listener.v3.FilterChain", "name", "metadata", "transport_socket_connect_timeout")
	mod("envoy.config.listener.v3.Filter", "typed_config")
	ign("envoy.config.listener.v3.Filter", "name")
	const hcm = "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
	mod(hcm, "codec_type", "rds", "route_config", "http_filters", "generate_request_id",
		"early_header_mutation_extensions", "stream_idle_timeout", "request_timeout", "use_remote_address",
		"xff_num_trusted_hops", "skip_xff_append", "via", "preserve_external_request_id",
		"always_set_request_id_in_response", "server_name", "server_header_transformation",
		"strip_matching_host_port", "strip_any_host_port", "strip_trailing_host_dot", "normalize_path",
		"merge_slashes", "path_with_escaped_slashes_action", "forward_client_cert_details",
		"common_http_protocol_options", "local_reply_config")
	ign(hcm, "stat_prefix", "access_log", "access_log_options", "access_log_flush_interval",
		"flush_access_log_on_new_request", "tracing", "http_protocol_options", "http2_protocol_options",
		"max_request_headers_kb", "drain_timeout", "drain_timeout_jitter", "delayed_close_timeout",
		"stream_flush_timeout", "request_headers_timeout", "proxy_100_continue",
		"represent_ipv4_remote_address_as_ipv4_mapped_ipv6", "record_route_resolution_stats",
		"http1_safe_max_connection_duration", "stream_error_on_invalid_http_message", "append_local_overload",
		"add_proxy_protocol_connection_state", "set_current_client_cert_details")
	mod("envoy.extensions.filters.network.http_connection_manager.v3.Rds", "config_source", "route_config_name")
	mod("envoy.extensions.filters.network.http_connection_manager.v3.LocalReplyConfig", "mappers", "body_format")
	mod("envoy.extensions.filters.network.http_connection_manager.v3.ResponseMapper", "filter", "status_code", "body", "body_format_override", "headers_to_add")
	mod("envoy.config.accesslog.v3.AccessLogFilter", "status_code_filter")
	mod("envoy.config.accesslog.v3.StatusCodeFilter", "comparison")
	mod("envoy.config.accesslog.v3.ComparisonFilter", "op", "value")
	mod("envoy.config.core.v3.RuntimeUInt32", "default_value")
	ign("envoy.config.core.v3.RuntimeUInt32", "runtime_key")
	mod("envoy.config.core.v3.SubstitutionFormatString", "text_format", "text_format_source", "content_type", "json_format")
	ign("envoy.config.core.v3.SubstitutionFormatString", "omit_empty_values")
	mod("envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter", "name", "typed_config")
	ign("envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter", "is_optional")
	mod("envoy.extensions.http.early_header_mutation.header_mutation.v3.HeaderMutation", "mutations")
	mod("envoy.config.common.mutation_rules.v3.HeaderMutation", "remove", "append", "remove_on_match")
	mod("envoy.config.common.mutation_rules.v3.HeaderMutation.RemoveOnMatch", "key_matcher")
	mod("envoy.extensions.filters.http.router.v3.Router", "suppress_envoy_headers")
	mod("envoy.extensions.filters.http.header_mutation.v3.HeaderMutation", "mutations")
	mod("envoy.extensions.filters.http.header_mutation.v3.Mutations", "request_mutations", "response_mutations")
	ign("envoy.extensions.filters.http.router.v3.Router", "dynamic_stats", "start_child_span", "upstream_log",
		"upstream_log_options", "suppress_grpc_request_failure_code_stats", "reject_connect_request_early_data",
		"strict_check_headers")

	// ext_proc.
	const extProc = "envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor"
	mod(extProc, "grpc_service", "failure_mode_allow", "processing_mode", "message_timeout", "mutation_rules",
		"max_message_timeout", "allow_mode_override", "disable_immediate_response", "disable_clear_route_cache",
		"route_cache_action", "status_on_error", "allowed_override_modes")
	ign(extProc, "stat_prefix", "filter_metadata", "deferred_close_timeout", "emit_client_span")
	mod("envoy.extensions.filters.http.ext_proc.v3.ProcessingMode", "request_header_mode", "response_header_mode",
		"request_body_mode", "response_body_mode", "request_trailer_mode", "response_trailer_mode")
	mod("envoy.config.common.mutation_rules.v3.HeaderMutationRules", "allow_all_routing", "allow_envoy",
		"disallow_system", "disallow_all", "allow_expression", "disallow_expression", "disallow_is_error")
	mod("envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute", "disabled", "overrides")
	mod("envoy.extensions.filters.http.ext_proc.v3.ExtProcOverrides", "processing_mode", "grpc_service",
		"grpc_initial_metadata", "metadata_options", "failure_mode_allow")

	// Routes.
	mod("envoy.config.route.v3.RouteConfiguration", "virtual_hosts", "response_headers_to_add",
		"response_headers_to_remove", "request_headers_to_add", "request_headers_to_remove",
		"most_specific_header_mutations_wins", "validate_clusters", "max_direct_response_body_size_bytes",
		"ignore_port_in_host_matching", "ignore_path_parameters_in_path_matching", "typed_per_filter_config",
		"internal_only_headers")
	ign("envoy.config.route.v3.RouteConfiguration", "name", "metadata")
	mod("envoy.config.route.v3.VirtualHost", "domains", "routes", "request_headers_to_add",
		"request_headers_to_remove", "response_headers_to_add", "response_headers_to_remove",
		"typed_per_filter_config")
	ign("envoy.config.route.v3.VirtualHost", "name", "metadata", "virtual_clusters")
	mod("envoy.config.route.v3.Route", "match", "route", "direct_response", "typed_per_filter_config",
		"request_headers_to_add", "request_headers_to_remove", "response_headers_to_add", "response_headers_to_remove")
	ign("envoy.config.route.v3.Route", "name", "metadata", "decorator", "tracing", "stat_prefix")
	mod("envoy.config.route.v3.RouteMatch", "prefix", "path", "safe_regex", "path_separated_prefix",
		"case_sensitive", "headers", "grpc")
	mod("envoy.config.route.v3.RouteMatch.GrpcRouteMatchOptions")
	mod("envoy.config.route.v3.HeaderMatcher", "name", "exact_match", "safe_regex_match", "range_match",
		"present_match", "prefix_match", "suffix_match", "contains_match", "string_match", "invert_match",
		"treat_missing_header_as_empty")
	mod("envoy.type.matcher.v3.StringMatcher", "exact", "prefix", "suffix", "safe_regex", "contains", "ignore_case")
	mod("envoy.type.matcher.v3.RegexMatcher", "regex")
	ign("envoy.type.matcher.v3.RegexMatcher", "google_re2")
	mod("envoy.config.route.v3.RouteAction", "cluster", "cluster_header", "weighted_clusters",
		"cluster_not_found_response_code", "timeout", "idle_timeout", "prefix_rewrite", "host_rewrite_literal",
		"retry_policy")
	mod("envoy.config.route.v3.RetryPolicy", "retry_on", "num_retries", "per_try_timeout", "retry_host_predicate",
		"host_selection_retry_max_attempts", "retriable_status_codes", "retry_back_off", "rate_limited_retry_back_off")
	mod("envoy.config.route.v3.RetryPolicy.RetryHostPredicate", "typed_config")
	ign("envoy.config.route.v3.RetryPolicy.RetryHostPredicate", "name")
	mod("envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate")
	mod("envoy.config.route.v3.RetryPolicy.RetryBackOff", "base_interval", "max_interval")
	mod("envoy.config.route.v3.RetryPolicy.RateLimitedRetryBackOff", "reset_headers", "max_interval")
	mod("envoy.config.route.v3.RetryPolicy.ResetHeader", "name", "format")
	ign("envoy.config.route.v3.RouteAction", "hash_policy")
	mod("envoy.config.route.v3.WeightedCluster", "clusters", "header_name")
	ign("envoy.config.route.v3.WeightedCluster", "total_weight")
	mod("envoy.config.route.v3.WeightedCluster.ClusterWeight", "name", "cluster_header", "weight",
		"request_headers_to_add", "request_headers_to_remove", "response_headers_to_add",
		"response_headers_to_remove", "typed_per_filter_config", "host_rewrite_literal")
	mod("envoy.config.route.v3.DirectResponseAction", "status", "body")
	return p
}
