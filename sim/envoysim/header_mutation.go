package envoysim

import (
	"context"
	"errors"
	"fmt"

	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	headermutationv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/header_mutation/v3"
)

// httpFilter is one HTTP filter of a stream, as the filter manager runs it:
// decode in configuration order on the request path, encode in reverse
// order on the response path (local replies included).
type httpFilter interface {
	// decode handles the request; a non-nil local reply ends decoding.
	decode(ctx context.Context) *localReply
	// encode handles the response; a non-nil local reply replaces it and
	// bypasses the remaining filters.
	encode(ctx context.Context, h *headerMap, body *responseBody) *localReply
	// destroy releases the filter at the end of the stream.
	destroy()
}

// httpFilterConfig is a configured HTTP filter.
type httpFilterConfig interface {
	newFilter(s *stream) httpFilter
}

var (
	_ httpFilter       = (*extProcFilter)(nil)
	_ httpFilter       = (*headerMutationFilter)(nil)
	_ httpFilterConfig = (*extProcConfig)(nil)
	_ httpFilterConfig = (*headerMutationConfig)(nil)
)

func (c *extProcConfig) newFilter(s *stream) httpFilter {
	return &extProcFilter{cfg: c, s: s}
}

// headerMutationConfig is a compiled envoy.filters.http.header_mutation
// (source/extensions/filters/http/header_mutation/header_mutation.cc): its
// request and response mutations, each a Http::HeaderMutations list
// (remove, remove_on_match, append with a HeaderValueOption) applied in
// order. Query parameter and trailer mutations, the formatters and per-route
// HeaderMutationPerRoute (whose merge semantics differ between Envoy
// releases) are refused.
type headerMutationConfig struct {
	request  []earlyMutation
	response []earlyMutation
}

func compileHeaderMutation(hm *headermutationv3.HeaderMutation) (*headerMutationConfig, error) {
	req, reqErrs := compileMutationList("request_mutations", hm.GetMutations().GetRequestMutations())
	resp, respErrs := compileMutationList("response_mutations", hm.GetMutations().GetResponseMutations())
	if err := errors.Join(append(reqErrs, respErrs...)...); err != nil {
		return nil, err
	}
	return &headerMutationConfig{request: req, response: resp}, nil
}

func compileMutationList(name string, src []*mutationrulesv3.HeaderMutation) ([]earlyMutation, []error) {
	var out []earlyMutation
	var errs []error
	for i, m := range src {
		em, err := compileEarlyMutation(m)
		if err != nil {
			errs = append(errs, fmt.Errorf("mutations.%s[%d]: %w", name, i, err))
			continue
		}
		out = append(out, em)
	}
	return out, errs
}

func (c *headerMutationConfig) newFilter(s *stream) httpFilter {
	return &headerMutationFilter{cfg: c, s: s}
}

// headerMutationFilter is the filter of one stream. decodeHeaders applies the
// request mutations, then looks up per-route configuration, which computes
// and caches the route; encodeHeaders applies the response mutations, with
// the request headers available to the formatters. Placed first in the chain
// it runs last on the response path, after the other filters saw the
// response headers.
type headerMutationFilter struct {
	cfg *headerMutationConfig
	s   *stream
}

func (f *headerMutationFilter) decode(context.Context) *localReply {
	for _, m := range f.cfg.request {
		m.applyTo(f.s.req, formatContext{req: f.s.req})
	}
	f.s.route()
	return nil
}

func (f *headerMutationFilter) encode(_ context.Context, h *headerMap, _ *responseBody) *localReply {
	fc := f.s.formatContext()
	for _, m := range f.cfg.response {
		m.applyTo(h, fc)
	}
	return nil
}

func (f *headerMutationFilter) destroy() {}
