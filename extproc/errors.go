package extproc

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/internal/bound"
	"github.com/ilbproject/ilb/openai"
)

// RequestError is a request ILB answers itself instead of routing: a bad
// request (4xx) or no capacity (503). It becomes an ImmediateResponse with
// an OpenAI-style JSON error body.
type RequestError struct {
	Status int    // HTTP status
	Type   string // OpenAI error type, e.g. invalid_request_error
	Code   string // machine-readable code, e.g. model_not_found
	Param  string // the offending field or header, "" if none
	Msg    string // human-readable, names the field and the value
	// RetryAfter, in seconds, goes in a retry-after header when > 0.
	RetryAfter int
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Msg)
}

// Reason is the reason code: the x-ilb-reason value, the reason label of
// the metrics and the decision record's reason, spelled as the JSON
// error's code (one spelling everywhere, e.g. model_not_found).
func (e *RequestError) Reason() string { return e.Code }

func badRequest(param, code, msg string) *RequestError {
	return &RequestError{Status: 400, Type: "invalid_request_error", Code: code, Param: param, Msg: msg}
}

// immediate is the one boundary that turns an error into Envoy's answer:
// a *RequestError, or the body parser's *openai.RequestError, keeps its
// status and code; anything else is an internal error (500) whose message
// is not leaked.
func immediate(err error) (*extprocv3.ProcessingResponse, *RequestError) {
	var re *RequestError
	var oe *openai.RequestError
	switch {
	case errors.As(err, &re):
	case errors.As(err, &oe):
		re = &RequestError{Status: oe.Status, Type: oe.Type, Code: oe.Code, Param: oe.Param, Msg: oe.Msg}
	default:
		re = &RequestError{Status: 500, Type: "internal_error", Code: "internal_error", Msg: "the router failed to process the request"}
	}
	// Messages quote client values in bounded excerpts already; the
	// bound here is the last line of defence for the body's size.
	body := openai.ErrorBody(re.Type, re.Code, bound.String(re.Msg, bound.Message), re.Param)
	var extra []*corev3.HeaderValueOption
	if re.RetryAfter > 0 {
		extra = append(extra, setRaw("retry-after", strconv.Itoa(re.RetryAfter)))
	}
	return localAnswer(re.Status, re.Reason(), "application/json", body, extra), re
}

// localAnswer is an answer ILB gives instead of routing: status, the
// reason code (x-ilb-reason, and Envoy's response code details
// ilb_<reason>_<status>), the body of contentType and extra headers.
func localAnswer(status int, reason, contentType string, body []byte, extra []*corev3.HeaderValueOption) *extprocv3.ProcessingResponse {
	hs := append([]*corev3.HeaderValueOption{setRaw("content-type", contentType), setRaw(header.Reason, reason)}, extra...)
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode(status)},
			// Envoy adds the route's response headers to a local reply
			// before these mutations (prepareLocalReplyViaFilterChain:
			// finalizeResponseHeaders, then modify_headers), so the report
			// headers are removed here: nothing was served, on any source.
			Headers: &extprocv3.HeaderMutation{SetHeaders: hs, RemoveHeaders: header.Report()},
			Body:    body,
			Details: "ilb_" + strings.ReplaceAll(reason, "-", "_") + "_" + strconv.Itoa(status),
		},
	}}
}

// setRaw overwrites a header; the value goes in raw_value only, which is
// the field Envoy reads (setting value too is an error).
func setRaw(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: key, RawValue: []byte(value)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}
