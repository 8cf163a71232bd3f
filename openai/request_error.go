package openai

import "fmt"

// RequestError is a request ParseBody refuses: a 400
// invalid_request_error in OpenAI's shape, naming the offending field
// (Param) and, in Msg, its value (bounded).
type RequestError struct {
	Status int    // HTTP status: 400
	Type   string // OpenAI error type: invalid_request_error
	Code   string // machine-readable: invalid_json, invalid_type, ...
	Param  string // the offending field, "" if none
	Msg    string // human-readable
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Msg)
}

func badRequest(param, code, msg string) *RequestError {
	return &RequestError{Status: 400, Type: "invalid_request_error", Code: code, Param: param, Msg: msg}
}
