package envoysim

import (
	"errors"
	"fmt"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Health check defaults (source/extensions/health_checkers/common/
// health_checker_base_impl.cc): the no-traffic interval is 60 s, the other
// intervals default to interval.
const defaultNoTrafficInterval = 60 * time.Second

// hcKind is the health checker type.
type hcKind int

const (
	hcHTTP hcKind = iota
	hcGRPC
)

// healthCheckConfig is a compiled HealthCheck.
type healthCheckConfig struct {
	kind                     hcKind
	timeout                  time.Duration
	interval                 time.Duration
	noTrafficInterval        time.Duration
	noTrafficHealthyInterval time.Duration
	unhealthyInterval        time.Duration
	unhealthyEdgeInterval    time.Duration
	healthyEdgeInterval      time.Duration
	unhealthyThreshold       uint32
	healthyThreshold         uint32
	reuseConnection          bool

	// HTTP (source/extensions/health_checkers/http/health_checker_impl.cc).
	host       string
	path       string
	method     string
	expected   []statusRange
	retriable  []statusRange
	http2      bool
	reqHeaders *headerParser

	// gRPC (source/extensions/health_checkers/grpc/health_checker_impl.cc).
	serviceName string
	authority   string
	metadata    *headerParser
}

// statusRange is a half-open [start, end) range of HTTP statuses.
type statusRange struct{ start, end int64 }

func inRanges(code int64, ranges []statusRange) bool {
	for _, r := range ranges {
		if code >= r.start && code < r.end {
			return true
		}
	}
	return false
}

// compileHealthChecks compiles Cluster.health_checks. Envoy's cluster
// manager refuses more than one ("Multiple health checks not supported"), and
// HealthCheckerFactory::create requires HTTP/2 for gRPC health checking.
func compileHealthChecks(cc *clusterConfig, hcs []*corev3.HealthCheck) error {
	switch len(hcs) {
	case 0:
		return nil
	case 1:
	default:
		return errors.New("health_checks: multiple health checks not supported")
	}
	h := hcs[0]
	c := &healthCheckConfig{
		timeout:            h.GetTimeout().AsDuration(),
		interval:           h.GetInterval().AsDuration(),
		noTrafficInterval:  durationOr(h.GetNoTrafficInterval(), defaultNoTrafficInterval),
		unhealthyThreshold: h.GetUnhealthyThreshold().GetValue(),
		healthyThreshold:   h.GetHealthyThreshold().GetValue(),
		reuseConnection:    h.GetReuseConnection() == nil || h.GetReuseConnection().GetValue(),
	}
	c.noTrafficHealthyInterval = durationOr(h.GetNoTrafficHealthyInterval(), c.noTrafficInterval)
	c.unhealthyInterval = durationOr(h.GetUnhealthyInterval(), c.interval)
	c.unhealthyEdgeInterval = durationOr(h.GetUnhealthyEdgeInterval(), c.unhealthyInterval)
	c.healthyEdgeInterval = durationOr(h.GetHealthyEdgeInterval(), c.interval)
	var errs []error
	switch {
	case h.GetHttpHealthCheck() != nil:
		c.kind = hcHTTP
		errs = append(errs, c.compileHTTP(h.GetHttpHealthCheck())...)
	case h.GetGrpcHealthCheck() != nil:
		c.kind = hcGRPC
		g := h.GetGrpcHealthCheck()
		c.serviceName, c.authority = g.GetServiceName(), g.GetAuthority()
		p, err := compileHeaderParser(g.GetInitialMetadata(), nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("health_checks[0].grpc_health_check.initial_metadata: %w", err))
		}
		c.metadata = p
		if !cc.http2 {
			errs = append(errs, fmt.Errorf("%s cluster must support HTTP/2 for gRPC healthchecking", cc.name))
		}
	default:
		errs = append(errs, errors.New("health_checks[0]: only http_health_check and grpc_health_check are supported by envoysim"))
	}
	cc.hc = c
	return errors.Join(errs...)
}

// compileHTTP applies HttpHealthCheckerImpl's constructor: method GET by
// default, expected statuses [200, 201) by default, ranges within
// [100, 600) with start < end, codec HTTP/1 unless HTTP2.
func (c *healthCheckConfig) compileHTTP(h *corev3.HealthCheck_HttpHealthCheck) []error {
	var errs []error
	c.host, c.path = h.GetHost(), h.GetPath()
	c.method = "GET"
	if m := h.GetMethod(); m != corev3.RequestMethod_METHOD_UNSPECIFIED {
		c.method = m.String()
	}
	switch h.GetCodecClientType() {
	case typev3.CodecClientType_HTTP1:
	case typev3.CodecClientType_HTTP2:
		c.http2 = true
	default:
		errs = append(errs, fmt.Errorf("health_checks[0].http_health_check.codec_client_type %s is not supported by envoysim", h.GetCodecClientType()))
	}
	for _, r := range []struct {
		name string
		in   []*typev3.Int64Range
		out  *[]statusRange
	}{{"expected", h.GetExpectedStatuses(), &c.expected}, {"retriable", h.GetRetriableStatuses(), &c.retriable}} {
		for _, sr := range r.in {
			switch {
			case sr.GetStart() >= sr.GetEnd():
				errs = append(errs, fmt.Errorf("invalid http %s status range: expecting start < end, but found start=%d and end=%d", r.name, sr.GetStart(), sr.GetEnd()))
			case sr.GetStart() < 100:
				errs = append(errs, fmt.Errorf("invalid http %s status range: expecting start >= 100, but found start=%d", r.name, sr.GetStart()))
			case sr.GetEnd() > 600:
				errs = append(errs, fmt.Errorf("invalid http %s status range: expecting end <= 600, but found end=%d", r.name, sr.GetEnd()))
			}
			*r.out = append(*r.out, statusRange{start: sr.GetStart(), end: sr.GetEnd()})
		}
	}
	if len(c.expected) == 0 {
		c.expected = []statusRange{{start: 200, end: 201}}
	}
	p, err := compileHeaderParser(h.GetRequestHeadersToAdd(), h.GetRequestHeadersToRemove())
	if err != nil {
		errs = append(errs, fmt.Errorf("health_checks[0].http_health_check: %w", err))
	}
	c.reqHeaders = p
	return errs
}

func durationOr(d *durationpb.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.AsDuration()
}
