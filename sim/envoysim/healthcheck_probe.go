package envoysim

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/proto"
)

// userAgentHealthChecker is Http::Headers::UserAgentValues.EnvoyHealthChecker.
const userAgentHealthChecker = "Envoy/HC"

// newTransport is the health checker's own client connection per host
// (health checks do not use the router's pool, nor count as its traffic):
// HTTP/1.1 or prior-knowledge HTTP/2 for an HTTP check per
// codec_client_type, HTTP/2 for gRPC; connections are kept between checks
// unless reuse_connection is false. With the cluster's TLS transport
// socket the connection is TLS (health checkers use the cluster's
// transport socket) and the codec is still the configured one, as in
// Envoy: HTTP/2 needs no ALPN agreement.
func (hc *healthChecker) newTransport() *http.Transport {
	d := &net.Dialer{Timeout: hc.cfg.timeout}
	t := &http.Transport{
		DialContext:         d.DialContext,
		DisableCompression:  true,
		DisableKeepAlives:   !hc.cfg.reuseConnection,
		MaxIdleConnsPerHost: 1,
		Proxy:               nil,
	}
	if u := hc.rt.cfg.tls; u != nil {
		outcome := hc.rt.stats.tls(hc.rt.cfg.name)
		t.DialContext = func(ctx context.Context, _, addr string) (net.Conn, error) {
			return dialUpstream(ctx, addr, hc.cfg.timeout, u, outcome)
		}
	}
	p := new(http.Protocols)
	if hc.cfg.kind == hcGRPC || hc.cfg.http2 {
		p.SetUnencryptedHTTP2(true)
	} else {
		p.SetHTTP1(true)
	}
	t.Protocols = p
	return t
}

// authority is HealthCheckerFactory::getHostname: the configured host
// (http_health_check.host, grpc_health_check.authority), else the cluster
// name. Endpoint health_check_config.hostname, which would come first, is
// refused by the policy.
func (hc *healthChecker) authority() string {
	if hc.cfg.kind == hcGRPC && hc.cfg.authority != "" {
		return hc.cfg.authority
	}
	if hc.cfg.kind == hcHTTP && hc.cfg.host != "" {
		return hc.cfg.host
	}
	return hc.rt.cfg.name
}

// requestHeaders builds the probe's extra headers: user-agent Envoy/HC,
// then the configured headers to add and remove, formatted with the
// upstream host and cluster.
func (hc *healthChecker) requestHeaders(req *http.Request, p *headerParser) {
	h := &headerMap{}
	h.add("user-agent", userAgentHealthChecker)
	p.evaluate(h, formatContext{req: h, upstreamHost: req.URL.Host, upstreamCluster: hc.rt.cfg.name})
	for _, e := range h.entries {
		req.Header.Add(e.key, e.value)
	}
}

// failure classifies a transport error: the probe timeout is
// NETWORK_TIMEOUT, anything else (connect failure, reset) NETWORK.
func failure(ctx context.Context) hcResult {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return hcResult{outcome: hcNetworkTimeout}
	}
	return hcResult{outcome: hcNetworkFailure}
}

// probeHTTP is HttpActiveHealthCheckSession: a request with method, path
// and host; the check completes at the end of the response. A status outside
// expected_statuses is a failure (retriable within retriable_statuses), with
// x-envoy-immediate-health-check-fail excluding the host; an expected status
// with x-envoy-degraded is degraded.
func (hc *healthChecker) probeHTTP(ctx context.Context, addr string) hcResult {
	req, err := http.NewRequestWithContext(ctx, hc.cfg.method, "http://"+addr+hc.cfg.path, http.NoBody)
	if err != nil {
		return hcResult{outcome: hcFailed}
	}
	req.Host = hc.authority()
	hc.requestHeaders(req, hc.cfg.reqHeaders)
	resp, err := hc.transport.RoundTrip(req)
	if err != nil {
		return failure(ctx)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return failure(ctx)
	}
	code := int64(resp.StatusCode)
	if !inRanges(code, hc.cfg.expected) {
		res := hcResult{outcome: hcFailed, immediateFail: resp.Header.Get("x-envoy-immediate-health-check-fail") != ""}
		if inRanges(code, hc.cfg.retriable) {
			res.outcome = hcRetriable
		}
		return res
	}
	if _, ok := resp.Header["X-Envoy-Degraded"]; ok {
		return hcResult{outcome: hcDegraded}
	}
	return hcResult{outcome: hcSucceeded}
}

// probeGRPC is GrpcActiveHealthCheckSession: grpc.health.v1.Health/Check
// over HTTP/2 with :authority, grpc-timeout and initial_metadata. Only grpc-status
// OK with a single SERVING response succeeds; any other answer (a non-200
// status, a wrong content-type, a bad frame, another status) is an ACTIVE
// failure, and a transport error a NETWORK one.
func (hc *healthChecker) probeGRPC(ctx context.Context, addr string) hcResult {
	msg, err := proto.Marshal(&grpc_health_v1.HealthCheckRequest{Service: hc.cfg.serviceName})
	if err != nil {
		return hcResult{outcome: hcFailed}
	}
	frame := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(frame[1:], uint32(len(msg)))
	frame = append(frame, msg...)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/grpc.health.v1.Health/Check", bytes.NewReader(frame))
	if err != nil {
		return hcResult{outcome: hcFailed}
	}
	req.Host = hc.authority()
	req.Header.Set("content-type", "application/grpc")
	req.Header.Set("te", "trailers")
	req.Header.Set("grpc-timeout", strconv.FormatInt(hc.cfg.timeout.Milliseconds(), 10)+"m")
	hc.requestHeaders(req, hc.cfg.metadata)
	resp, err := hc.transport.RoundTrip(req)
	if err != nil {
		return failure(ctx)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return failure(ctx)
	}
	if resp.StatusCode != http.StatusOK || !isGrpcContentType(resp.Header.Get("content-type")) {
		return hcResult{outcome: hcFailed}
	}
	status := resp.Trailer.Get("grpc-status")
	if len(body) == 0 {
		status = resp.Header.Get("grpc-status") // trailers-only response
	}
	if status != "0" || len(body) < 5 || body[0] != 0 {
		return hcResult{outcome: hcFailed}
	}
	n := binary.BigEndian.Uint32(body[1:5])
	if uint64(len(body)) != 5+uint64(n) {
		return hcResult{outcome: hcFailed} // a truncated frame or more than one message
	}
	var out grpc_health_v1.HealthCheckResponse
	if err := proto.Unmarshal(body[5:], &out); err != nil || out.GetStatus() != grpc_health_v1.HealthCheckResponse_SERVING {
		return hcResult{outcome: hcFailed}
	}
	return hcResult{outcome: hcSucceeded}
}

// isGrpcContentType is Grpc::Common::isGrpcResponseHeaders' content-type
// test: "application/grpc", optionally followed by "+..." or ";...".
func isGrpcContentType(ct string) bool {
	rest, ok := strings.CutPrefix(ct, "application/grpc")
	return ok && (rest == "" || rest[0] == '+' || rest[0] == ';')
}
