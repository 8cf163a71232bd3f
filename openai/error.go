package openai

import "encoding/json"

// Error is the error object of an OpenAI API error response
// ({"error": Error}). Its fields are in the order a JSON object of them
// has always been written by ILB (sorted keys), so bodies and golden
// files do not change with the writer.
type Error struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Param   *string `json:"param"` // null when the error is about no parameter
	Type    string  `json:"type"`
}

// ErrorBody is the JSON body of an error of type typ (invalid_request_error,
// service_unavailable, ...) and code, saying msg, about the request
// parameter param ("": none, written as null). The caller bounds msg:
// it may quote client values.
func ErrorBody(typ, code, msg, param string) []byte {
	e := Error{Code: code, Message: msg, Type: typ}
	if param != "" {
		e.Param = &param
	}
	b, err := json.Marshal(struct {
		Error Error `json:"error"`
	}{e})
	if err != nil { // strings always marshal
		panic("openai: marshal an error body: " + err.Error())
	}
	return b
}
