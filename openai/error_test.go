package openai_test

import (
	"encoding/json"
	"testing"

	"github.com/ilbproject/ilb/openai"
)

// TestErrorBody: the body is what OpenAI's SDKs parse (error.message,
// type, param, code), byte for byte what ILB wrote before it had one
// writer (keys sorted, HTML escaped, param null when there is none).
func TestErrorBody(t *testing.T) {
	tests := []struct {
		name                  string
		typ, code, msg, param string
		want                  string
	}{
		{
			"no parameter", "service_unavailable", "no_capacity", `no engine cluster has capacity for model "m"`, "",
			`{"error":{"code":"no_capacity","message":"no engine cluster has capacity for model \"m\"","param":null,"type":"service_unavailable"}}`,
		},
		{
			"a parameter", "invalid_request_error", "model_not_found", "the model x does not exist", "model",
			`{"error":{"code":"model_not_found","message":"the model x does not exist","param":"model","type":"invalid_request_error"}}`,
		},
		{
			"HTML and control bytes escaped", "invalid_request_error", "invalid_json", "<b>&\n\u2028", "",
			`{"error":{"code":"invalid_json","message":"\u003cb\u003e\u0026\n\u2028","param":null,"type":"invalid_request_error"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := openai.ErrorBody(tt.typ, tt.code, tt.msg, tt.param)
			if string(got) != tt.want {
				t.Errorf("body\n%s\nwant\n%s", got, tt.want)
			}
			// What the map-based writers produced: the same bytes.
			var param any
			if tt.param != "" {
				param = tt.param
			}
			old, err := json.Marshal(map[string]any{"error": map[string]any{"message": tt.msg, "type": tt.typ, "param": param, "code": tt.code}})
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(old) {
				t.Errorf("body differs from the map-based writer's:\n%s\n%s", got, old)
			}
		})
	}
}
