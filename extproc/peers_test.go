package extproc

import (
	"context"
	"net"
	"testing"

	"google.golang.org/grpc/peer"
)

// TestPeerAddrTCP: a TCP peer is named by the host part of its address
// as net.SplitHostPort reads it from the address's String.
func TestPeerAddrTCP(t *testing.T) {
	for _, a := range []*net.TCPAddr{
		{IP: net.ParseIP("10.0.0.7"), Port: 51000},
		{IP: net.ParseIP("127.0.0.1").To4(), Port: 1},
		{IP: net.ParseIP("fd00::1"), Port: 8000},
		{IP: net.ParseIP("fe80::1"), Port: 8000, Zone: "eth0"},
		{IP: nil, Port: 9},
		{IP: net.IP{1, 2, 3}, Port: 9}, // an invalid length
	} {
		want, _, err := net.SplitHostPort(a.String())
		if err != nil {
			t.Fatal(err)
		}
		if got := peerAddr(peer.NewContext(context.Background(), &peer.Peer{Addr: a})); got != want {
			t.Errorf("peerAddr(%v) = %q; want %q", a, got, want)
		}
	}
}
