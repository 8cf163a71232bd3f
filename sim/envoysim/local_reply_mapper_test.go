package envoysim

import (
	"strings"
	"testing"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// TestLocalReplyMappers: the modelled subset of local_reply_config
// compiles and rewrites the first matching reply (status_code_filter,
// body, body_format_override with %LOCAL_REPLY_BODY%, headers_to_add);
// the rest is refused, never ignored.
func TestLocalReplyMappers(t *testing.T) {
	status := func(op accesslogv3.ComparisonFilter_Op, v uint32) *accesslogv3.AccessLogFilter {
		return &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_StatusCodeFilter{StatusCodeFilter: &accesslogv3.StatusCodeFilter{
			Comparison: &accesslogv3.ComparisonFilter{Op: op, Value: &corev3.RuntimeUInt32{DefaultValue: v, RuntimeKey: "k"}},
		}}}
	}
	inline := func(s string) *corev3.DataSource {
		return &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: s}}
	}
	jsonBody := &hcmv3.ResponseMapper{
		Filter: status(accesslogv3.ComparisonFilter_EQ, 413), Body: inline(`{"error":"big"}`),
		BodyFormatOverride: &corev3.SubstitutionFormatString{Format: &corev3.SubstitutionFormatString_TextFormatSource{TextFormatSource: inline("%LOCAL_REPLY_BODY%")}, ContentType: "application/json"},
		HeadersToAdd:       []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-why", Value: "size"}}},
	}
	for _, tc := range []struct {
		name     string
		mappers  []*hcmv3.ResponseMapper
		bodyFmt  *corev3.SubstitutionFormatString
		err      string
		code     string // reply status
		wantBody string
		wantCT   string
	}{
		{name: "413 rewritten", mappers: []*hcmv3.ResponseMapper{jsonBody}, code: "413", wantBody: `{"error":"big"}`, wantCT: "application/json"},
		{name: "404 untouched", mappers: []*hcmv3.ResponseMapper{jsonBody}, code: "404", wantBody: "Payload Too Large"},
		{name: "GE matches above", mappers: []*hcmv3.ResponseMapper{{Filter: status(accesslogv3.ComparisonFilter_GE, 500), StatusCode: nil, Body: inline("server")}}, code: "503", wantBody: "server"},
		{name: "another filter is refused", mappers: []*hcmv3.ResponseMapper{{Filter: &accesslogv3.AccessLogFilter{FilterSpecifier: &accesslogv3.AccessLogFilter_NotHealthCheckFilter{NotHealthCheckFilter: &accesslogv3.NotHealthCheckFilter{}}}}}, err: "only status_code_filter"},
		{name: "json_format is refused", mappers: []*hcmv3.ResponseMapper{{Filter: status(accesslogv3.ComparisonFilter_EQ, 413), BodyFormatOverride: &corev3.SubstitutionFormatString{Format: &corev3.SubstitutionFormatString_JsonFormat{JsonFormat: &structpb.Struct{}}}}}, err: "only text_format_source"},
		{name: "other operators are refused", mappers: []*hcmv3.ResponseMapper{{Filter: status(accesslogv3.ComparisonFilter_EQ, 413), BodyFormatOverride: &corev3.SubstitutionFormatString{Format: &corev3.SubstitutionFormatString_TextFormatSource{TextFormatSource: inline("%RESPONSE_CODE%")}}}}, err: "only %LOCAL_REPLY_BODY%"},
		{name: "a top-level body_format is refused", bodyFmt: &corev3.SubstitutionFormatString{Format: &corev3.SubstitutionFormatString_TextFormatSource{TextFormatSource: inline("x")}}, err: "body_format is not supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms, err := compileLocalReply(&hcmv3.LocalReplyConfig{Mappers: tc.mappers, BodyFormat: tc.bodyFmt})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			s := &stream{hcm: &hcmConfig{localReply: ms}}
			h := &headerMap{}
			h.add(":status", tc.code)
			if got := s.rewriteLocalReply(h, "Payload Too Large"); got != tc.wantBody || h.value("content-type") != tc.wantCT {
				t.Errorf("body %q content-type %q, want %q %q", got, h.value("content-type"), tc.wantBody, tc.wantCT)
			}
		})
	}
}
