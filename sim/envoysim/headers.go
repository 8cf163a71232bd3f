package envoysim

import (
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// header is one entry of a header map: a lower-case key and its value.
type header struct {
	key   string
	value string
}

// headerMap is an ordered multimap of HTTP headers with lower-case keys, the
// shape of Envoy's Http::HeaderMap (source/common/http/header_map_impl.cc):
// pseudo headers (":authority", ":path", ":method", ":scheme", ":status")
// come first, a key may repeat, and insertion order is kept (it is the order
// an ext_proc server sees). The zero value is an empty map.
type headerMap struct {
	entries []header
}

// get returns every value of key, in order.
func (m *headerMap) get(key string) []string {
	var out []string
	for _, e := range m.entries {
		if e.key == key {
			out = append(out, e.value)
		}
	}
	return out
}

// first returns the first value of key.
func (m *headerMap) first(key string) (string, bool) {
	for _, e := range m.entries {
		if e.key == key {
			return e.value, true
		}
	}
	return "", false
}

// value returns the first value of key, or "".
func (m *headerMap) value(key string) string {
	v, _ := m.first(key)
	return v
}

// has reports whether key is present.
func (m *headerMap) has(key string) bool {
	_, ok := m.first(key)
	return ok
}

// joined returns every value of key joined with ",", as Envoy's
// HeaderUtility::getAllOfHeaderAsString does for header matching
// (source/common/http/header_utility.cc).
func (m *headerMap) joined(key string) (string, bool) {
	vals := m.get(key)
	if len(vals) == 0 {
		return "", false
	}
	return strings.Join(vals, ","), true
}

// add appends a value; a pseudo header is inserted after the existing pseudo
// headers so that they stay first.
func (m *headerMap) add(key, value string) {
	if !strings.HasPrefix(key, ":") {
		m.entries = append(m.entries, header{key: key, value: value})
		return
	}
	i := 0
	for i < len(m.entries) && strings.HasPrefix(m.entries[i].key, ":") {
		i++
	}
	m.entries = append(m.entries, header{})
	copy(m.entries[i+1:], m.entries[i:])
	m.entries[i] = header{key: key, value: value}
}

// set replaces every value of key with value (Envoy's setCopy: remove, then
// add).
func (m *headerMap) set(key, value string) {
	m.remove(key)
	m.add(key, value)
}

// remove deletes every value of key.
func (m *headerMap) remove(key string) {
	out := m.entries[:0]
	for _, e := range m.entries {
		if e.key != key {
			out = append(out, e)
		}
	}
	clear(m.entries[len(out):])
	m.entries = out
}

// removeIf deletes every entry whose key satisfies drop.
func (m *headerMap) removeIf(drop func(key string) bool) {
	out := m.entries[:0]
	for _, e := range m.entries {
		if !drop(e.key) {
			out = append(out, e)
		}
	}
	clear(m.entries[len(out):])
	m.entries = out
}

// byteSize is the sum of key and value lengths, Envoy's HeaderMap::byteSize.
func (m *headerMap) byteSize() int {
	n := 0
	for _, e := range m.entries {
		n += len(e.key) + len(e.value)
	}
	return n
}

// toProto renders the map as ext_proc sends it: every entry, key lower-case,
// value in raw_value (source/extensions/filters/http/ext_proc/mutation_utils.cc
// headersToProto, runtime send_header_raw_value on by default).
func (m *headerMap) toProto() *corev3.HeaderMap {
	out := &corev3.HeaderMap{Headers: make([]*corev3.HeaderValue, 0, len(m.entries))}
	for _, e := range m.entries {
		out.Headers = append(out.Headers, &corev3.HeaderValue{Key: e.key, RawValue: []byte(e.value)})
	}
	return out
}

// isModifiableHeader mirrors HeaderUtility::isModifiableHeader: neither a
// pseudo header nor "host" may be added or removed by configuration
// (source/common/http/header_utility.cc).
func isModifiableHeader(key string) bool {
	return key != "" && key[0] != ':' && !strings.EqualFold(key, "host")
}

// headerNameIsValid mirrors HeaderUtility::headerNameIsValid: RFC 9110 token
// characters (upper case allowed), an optional leading ':' for pseudo
// headers. envoysim also rejects the empty name.
func headerNameIsValid(name string) bool {
	name = strings.TrimPrefix(name, ":")
	if name == "" {
		return false
	}
	for i := range len(name) {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// headerValueIsValid mirrors HeaderUtility::headerValueIsValid: no NUL, CR
// or LF.
func headerValueIsValid(value string) bool {
	return !strings.ContainsAny(value, "\x00\r\n")
}

// hopByHopRequestHeaders are removed from every request by the HTTP
// connection manager (ConnectionManagerUtility::mutateRequestHeaders,
// source/common/http/conn_manager_utility.cc); "te" is kept only when its
// value is "trailers".
func stripHopByHop(h *headerMap) {
	h.removeIf(func(k string) bool {
		switch k {
		case "connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade":
			return true
		}
		return false
	})
	if te, ok := h.first("te"); ok && !strings.EqualFold(strings.TrimSpace(te), "trailers") {
		h.remove("te")
	}
}
