package connlimit

import (
	"net"
	"net/http"
)

// ConnState is an http.Server.ConnState hook telling the group which
// connections serve a request (a long-lived one, such as a followed
// stream, is never shed for a new connection).
func (g *Group) ConnState(c net.Conn, s http.ConnState) {
	switch s {
	case http.StateActive:
		g.SetActive(c.RemoteAddr().String(), true)
	case http.StateIdle:
		g.SetActive(c.RemoteAddr().String(), false)
	}
}
