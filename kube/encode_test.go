package kube

import (
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// TestEncodeEndpoints: what a newer API server refuses but an older one
// (or a hostile writer) may store — non-canonical IPv6, IPv4-mapped IPv6,
// an address of the other family, a zoned address, a zone with control
// characters — is normalised or left out, never passed on.
func TestEncodeEndpoints(t *testing.T) {
	tests := []struct {
		name   string
		family discoveryv1.AddressType
		addrs  []string
		zone   string
		want   string
	}{
		{"canonical IPv4", discoveryv1.AddressTypeIPv4, []string{"10.0.0.1"}, "z", "10.0.0.1\t\tz\n"},
		{"non-canonical IPv6", discoveryv1.AddressTypeIPv6, []string{"FD00:0::1"}, "", "fd00::1\t\t\n"},
		{"IPv4-mapped in an IPv4 slice", discoveryv1.AddressTypeIPv4, []string{"::ffff:10.0.0.1"}, "", "10.0.0.1\t\t\n"},
		{"IPv6 in an IPv4 slice", discoveryv1.AddressTypeIPv4, []string{"fd00::1"}, "", ""},
		{"zoned address", discoveryv1.AddressTypeIPv6, []string{"fe80::1%eth0"}, "", ""},
		{"not an address", discoveryv1.AddressTypeIPv4, []string{"10.0.0.1\nx"}, "", ""},
		{"zone with a newline", discoveryv1.AddressTypeIPv4, []string{"10.0.0.1"}, "a\nb", "10.0.0.1\t\t\n"},
		{"first address only", discoveryv1.AddressTypeIPv4, []string{"10.0.0.1", "10.0.0.2"}, "", "10.0.0.1\t\t\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			es := &discoveryv1.EndpointSlice{AddressType: tt.family, Endpoints: []discoveryv1.Endpoint{{Addresses: tt.addrs, Zone: ptr.To(tt.zone)}}}
			if got, _ := encodeEndpoints(es); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
