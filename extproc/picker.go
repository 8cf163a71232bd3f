package extproc

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/ilbproject/ilb/header"
)

// AsSource is the stream interceptor of an endpoint picker's listener
// (sources[].picker.listen: routing "picker"): every ext_proc stream on
// it is source's, whatever x-ilb-source its peer sends (the Gateway API
// Inference Extension's gateways send none). The Authorizer then checks
// the peer may speak for that source, as on ILB's main port.
func AsSource(source string) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		md, _ := metadata.FromIncomingContext(ss.Context())
		md = md.Copy()
		md.Set(header.Source, source)
		return handler(srv, &sourceStream{ServerStream: ss, ctx: metadata.NewIncomingContext(ss.Context(), md)})
	}
}

// sourceStream is a stream whose context carries the forced source.
type sourceStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *sourceStream) Context() context.Context { return s.ctx }
