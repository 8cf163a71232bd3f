package signals

import (
	"errors"
	"io"
	"net"
	"syscall"
)

// probeError is a failed health probe or metrics fetch, with what kind of
// failure it was. Its text is the reason as shown in states and logs.
type probeError struct {
	msg string
	// silent: nothing answered (a timeout, no route, an error on ILB's
	// side). Otherwise the failure is definite: the replica or its host
	// answered (connection refused, a reset or close after connecting, an
	// HTTP status other than 2xx, a name that does not exist).
	silent bool
}

func (e *probeError) Error() string { return e.msg }

// definite wraps the text of a failure that the replica or its host
// answered.
func definite(msg string) error { return &probeError{msg: msg} }

// isSilent reports whether err, returned by a probe or a fetch, is a
// silent failure. Anything not known to be an answer is silent: an
// unknown error says nothing about the replica. Errors that are not
// probeErrors are classified by classifyTransport first.
func isSilent(err error) bool {
	var pe *probeError
	if errors.As(err, &pe) {
		return pe.silent
	}
	return classifyTransport(err)
}

// classifyTransport reports whether a transport error (from
// http.Client.Do or a body read) is silent. The peer answered when the
// connection was refused (ECONNREFUSED: a host without a listener on the
// port, i.e. a dead engine process), reset or closed by it (ECONNRESET,
// EPIPE, EOF after connecting), or when DNS said the name does not exist.
// Timeouts, unreachable hosts or networks and errors of ILB's own (too
// many open files, a cancelled context) are silent.
func classifyTransport(err error) bool {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return false
	}
	var dns *net.DNSError
	if errors.As(err, &dns) && dns.IsNotFound {
		return false
	}
	return true
}
