package xds

import (
	"net"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/ilbproject/ilb/config"
)

// Endpoint is one engine replica as EDS carries it.
type Endpoint struct {
	// Address is host:port.
	Address string `json:"address"`
	// Health is what Envoy is told: HEALTHY endpoints take traffic,
	// DRAINING ones finish what they have, UNHEALTHY ones get nothing.
	Health corev3.HealthStatus `json:"health"`
	// Weight is the load-balancing weight in 1..MaxWeight (a warming
	// replica gets less); 0 means MaxWeight.
	Weight uint32 `json:"weight,omitempty"`
}

// MaxWeight is the load-balancing weight of a fully ready replica.
const MaxWeight = 100

// Endpoints are the replicas of every engine cluster, by cluster name. A
// cluster missing from the map has its configured static endpoints.
type Endpoints map[string][]Endpoint

// StaticEndpoints lists the configured endpoints, all healthy: what EDS
// carries before (or without) engine signals.
func StaticEndpoints(c *config.Config) Endpoints {
	out := Endpoints{}
	for _, e := range c.Clusters {
		for _, ep := range e.Endpoints {
			out[e.Name] = append(out[e.Name], Endpoint{Address: ep, Health: corev3.HealthStatus_HEALTHY, Weight: MaxWeight})
		}
	}
	return out
}

// of returns a cluster's endpoints, the static ones when eps has none.
func (eps Endpoints) of(e config.EngineCluster) []Endpoint {
	if v, ok := eps[e.Name]; ok {
		return v
	}
	out := make([]Endpoint, len(e.Endpoints))
	for i, ep := range e.Endpoints {
		out[i] = Endpoint{Address: ep, Health: corev3.HealthStatus_HEALTHY, Weight: MaxWeight}
	}
	return out
}

// allIP reports whether every endpoint is an IP address (EDS needs that;
// otherwise the cluster is STRICT_DNS and Envoy resolves the names).
func allIP(eps []Endpoint) bool {
	for _, ep := range eps {
		host, _, err := net.SplitHostPort(ep.Address)
		if err != nil || net.ParseIP(host) == nil {
			return false
		}
	}
	return true
}
