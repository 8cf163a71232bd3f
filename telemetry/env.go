package telemetry

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
)

// Protocols of the OTLP exporter.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// DefaultServiceName is service.name when OTEL_SERVICE_NAME is unset.
const DefaultServiceName = "ilb"

// config is what the environment asks for.
type config struct {
	enabled  bool
	protocol string
	// endpoint is the exporter's target: a URL with a scheme (for HTTP the
	// full URL of the traces path), or host:port (gRPC only).
	endpoint string
	// endpointVar names the variable endpoint came from ("" for the
	// default).
	endpointVar string
	insecure    bool
	attrs       []attribute.KeyValue // resource, service.name last
}

// parseEnv reads the OTEL_* variables. Every error names the variable,
// its value and the accepted values.
func parseEnv(getenv func(string) string) (config, error) {
	var c config
	disabled, err := parseBool(getenv, "OTEL_SDK_DISABLED")
	if err != nil || disabled {
		return c, err
	}
	tracesEP, baseEP := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")), strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	// OTEL_TRACES_EXPORTER is a comma-separated list (the spec); ILB
	// exports over OTLP only: otlp in the list turns it on, other
	// exporters are refused unless otlp is there too (then they are
	// ignored, as the SDK does with exporters it does not know).
	switch v := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); v {
	case "":
		c.enabled = tracesEP != "" || baseEP != ""
	case "none":
	default:
		var names []string
		for n := range strings.SplitSeq(v, ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
		if !slices.Contains(names, "otlp") {
			return c, fmt.Errorf("OTEL_TRACES_EXPORTER is %q: want otlp (alone or in a list) or none; ILB exports traces over OTLP only", v)
		}
		c.enabled = true
	}
	if !c.enabled {
		return c, nil
	}
	// The spec's default transport is http/protobuf ("SHOULD be
	// http/protobuf unless SDKs have good reasons to choose grpc";
	// specification/protocol/exporter.md), which ILB follows.
	c.protocol = ProtocolHTTP
	for _, name := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		v := strings.TrimSpace(getenv(name))
		if v == "" {
			continue
		}
		if v != ProtocolGRPC && v != ProtocolHTTP {
			return c, fmt.Errorf("%s is %q: want grpc or http/protobuf (http/json is not supported)", name, v)
		}
		c.protocol = v
		break
	}
	if c.insecure, err = firstBool(getenv, "OTEL_EXPORTER_OTLP_TRACES_INSECURE", "OTEL_EXPORTER_OTLP_INSECURE"); err != nil {
		return c, err
	}
	if err := c.resolveEndpoint(tracesEP, baseEP); err != nil {
		return c, err
	}
	c.attrs, err = parseResource(getenv)
	return c, err
}

// resolveEndpoint picks the endpoint: the traces variable as is, else the
// base one (HTTP: plus /v1/traces), else the spec's default.
func (c *config) resolveEndpoint(tracesEP, baseEP string) error {
	v, name := tracesEP, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	if v == "" {
		v, name = baseEP, "OTEL_EXPORTER_OTLP_ENDPOINT"
	}
	if v == "" {
		c.endpoint = "http://localhost:4318/v1/traces"
		if c.protocol == ProtocolGRPC {
			c.endpoint = "http://localhost:4317"
		}
		return nil
	}
	c.endpointVar = name
	u, err := url.Parse(v)
	if err == nil && u.Scheme == "unix" && c.protocol == ProtocolGRPC {
		c.endpoint = v // a Unix socket: the gRPC exporter dials it as is
		return nil
	}
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		if c.protocol == ProtocolGRPC && !strings.Contains(v, "/") && strings.Contains(v, ":") {
			c.endpoint = v // host:port: gRPC's own form, security from *_INSECURE
			return nil
		}
		return fmt.Errorf("%s is %q: want a URL with scheme http or https (e.g. http://collector:4318), or host:port or unix:///path for grpc", name, v)
	}
	if c.protocol == ProtocolHTTP && name == "OTEL_EXPORTER_OTLP_ENDPOINT" {
		u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
	}
	c.endpoint = u.String()
	return nil
}

// parseResource reads OTEL_RESOURCE_ATTRIBUTES (key=value pairs separated
// by commas, values percent-encoded) and OTEL_SERVICE_NAME, which wins.
func parseResource(getenv func(string) string) ([]attribute.KeyValue, error) {
	var attrs []attribute.KeyValue
	service := DefaultServiceName
	if raw := strings.TrimSpace(getenv("OTEL_RESOURCE_ATTRIBUTES")); raw != "" {
		for pair := range strings.SplitSeq(raw, ",") {
			if strings.TrimSpace(pair) == "" {
				continue // a trailing or doubled comma
			}
			k, v, ok := strings.Cut(pair, "=")
			k = strings.TrimSpace(k)
			if !ok || k == "" {
				return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES is %q: the pair %q is not key=value", raw, pair)
			}
			val, err := url.PathUnescape(strings.TrimSpace(v))
			if err != nil {
				return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES is %q: the value of %s is not percent-encoded: %w", raw, k, err)
			}
			if k == "service.name" {
				service = val
				continue
			}
			attrs = append(attrs, attribute.String(k, val))
		}
	}
	if v := strings.TrimSpace(getenv("OTEL_SERVICE_NAME")); v != "" {
		service = v
	}
	return append(attrs, attribute.String("service.name", service)), nil
}

// firstBool is the first of the variables that is set.
func firstBool(getenv func(string) string, names ...string) (bool, error) {
	for _, name := range names {
		if strings.TrimSpace(getenv(name)) != "" {
			return parseBool(getenv, name)
		}
	}
	return false, nil
}

// parseBool reads a boolean variable as the Go OTLP exporters read theirs
// (strconv.ParseBool: true, false, 1, 0, t, f, any case); unset is false.
func parseBool(getenv func(string) string, name string) (bool, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s is %q: want true or false (or 1 or 0)", name, v)
	}
	return b, nil
}
