package extproc

// newExchange is the state of a new stream from source: a recycled one
// when an ended stream left one (freeExchange), else a new one. A
// stream's state is more than a kilobyte (its decision record is half
// of it): recycled, it is cleared rather than allocated and collected
// with every request.
func (s *Server) newExchange(source string) *exchange {
	x, _ := s.exchanges.Get().(*exchange)
	if x == nil {
		x = new(exchange)
	}
	x.source = source
	return x
}

// freeExchange clears x and keeps it for a later stream. The caller is
// the last to touch x: its stream ended, every deferred settlement of
// serve ran, and nothing kept a pointer into x: the decision log keeps
// its own encoding of the record and subscribers get copies; no answer
// given to Send lives in x (gRPC may read one after Send returns); the
// idle scan let go of x.idle when remove returned.
func (s *Server) freeExchange(x *exchange) {
	*x = exchange{}
	s.exchanges.Put(x)
}
