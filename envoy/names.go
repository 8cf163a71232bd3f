package envoy

// Names of the Envoy extensions ILB configures, as Envoy registers them
// (the name field of an HTTP filter or extension). xds writes them into
// ILB's listener and istio into its EnvoyFilter patches; the two must
// agree for the Istio mode to equal ILB's own listener.
const (
	ExtProcFilter        = "envoy.filters.http.ext_proc"
	HeaderMutationFilter = "envoy.filters.http.header_mutation"
	EarlyHeaderMutation  = "envoy.http.early_header_mutation.header_mutation"
)
