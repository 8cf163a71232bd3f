// Package connlimit bounds the connections a listener serves, so that
// idle or handshake-less connections from anyone who reaches a port
// cannot take the process's file descriptors (and with them every other
// port: admin, xDS).
//
// A Group counts the connections of one or more listeners (Wrap): at
// most Limits.Max at once, at most Limits.PerPeer from one IP address.
// A connection from a peer at its cap is closed at once. At the total
// cap, the connection idle longest (no gRPC stream open: see Group.Stats,
// a grpc stats handler; for HTTP, every connection counts as idle) is
// closed to make room, and only when none is idle is the new one closed:
// working connections are never shed for new ones. Counts and refusals
// are reported through Limits.OnRefuse.
//
// Safe for concurrent use. The accept loop of a wrapped listener owns no
// goroutine of its own.
package connlimit
