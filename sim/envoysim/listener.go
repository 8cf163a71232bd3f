package envoysim

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	rawbufferv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	"google.golang.org/protobuf/proto"
)

// defaultBufferLimit is Listener.per_connection_buffer_limit_bytes when
// unset (1 MiB).
const defaultBufferLimit = 1 << 20

// listenerConfig is a compiled Listener: one socket address and one filter
// chain holding one HTTP connection manager.
type listenerConfig struct {
	name        string
	addr        string // host:port as configured; port 0 binds an ephemeral port
	bufferLimit int
	hcm         *hcmConfig
	proto       *listenerv3.Listener
}

func compileListener(l *listenerv3.Listener, clusterExists func(string) bool) (*listenerConfig, error) {
	lc := &listenerConfig{name: l.GetName(), bufferLimit: defaultBufferLimit, proto: proto.Clone(l).(*listenerv3.Listener)}
	var errs []error
	sa := l.GetAddress().GetSocketAddress()
	switch {
	case sa == nil:
		errs = append(errs, errors.New("address.socket_address is required by envoysim"))
	case sa.GetProtocol() != corev3.SocketAddress_TCP:
		errs = append(errs, errors.New("address.socket_address.protocol: only TCP is supported"))
	default:
		lc.addr = net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue())))
	}
	if b := l.GetBindToPort(); b != nil && !b.GetValue() {
		errs = append(errs, errors.New("bind_to_port: false is not supported by envoysim"))
	}
	if v := l.GetPerConnectionBufferLimitBytes(); v != nil {
		lc.bufferLimit = int(v.GetValue())
		if lc.bufferLimit == 0 {
			lc.bufferLimit = math.MaxInt32 // 0 disables the buffer limit (watermark buffers)
		}
	}
	if len(l.GetFilterChains()) != 1 {
		errs = append(errs, fmt.Errorf("filter_chains: envoysim supports exactly one filter chain, got %d", len(l.GetFilterChains())))
		return lc, errors.Join(errs...)
	}
	fc := l.GetFilterChains()[0]
	if ts := fc.GetTransportSocket().GetTypedConfig(); ts != nil && !ts.MessageIs(&rawbufferv3.RawBuffer{}) {
		errs = append(errs, fmt.Errorf("filter_chains[0].transport_socket: %s is not supported by envoysim on listeners (raw_buffer only)", ts.GetTypeUrl()))
	}
	if len(fc.GetFilters()) != 1 {
		errs = append(errs, fmt.Errorf("filter_chains[0].filters: envoysim supports exactly one http_connection_manager filter, got %d", len(fc.GetFilters())))
		return lc, errors.Join(errs...)
	}
	var hcm hcmv3.HttpConnectionManager
	if err := fc.GetFilters()[0].GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		errs = append(errs, fmt.Errorf("filter_chains[0].filters[0]: only envoy.filters.network.http_connection_manager is supported: %w", err))
		return lc, errors.Join(errs...)
	}
	h, err := compileHCM(&hcm, clusterExists)
	if err != nil {
		errs = append(errs, fmt.Errorf("http_connection_manager: %w", err))
	}
	lc.hcm = h
	return lc, errors.Join(errs...)
}
