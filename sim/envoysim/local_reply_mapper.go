package envoysim

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	accesslogv3 "github.com/envoyproxy/go-control-plane/envoy/config/accesslog/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// localReplyMapper is one compiled local_reply_config mapper
// (source/common/local_reply/local_reply.cc, ResponseMapper): the subset
// envoysim models is a status_code_filter, a status code, an inline body,
// a body_format_override whose text is "%LOCAL_REPLY_BODY%" (or literal
// text) with its content_type, and headers_to_add.
type localReplyMapper struct {
	op          accesslogv3.ComparisonFilter_Op
	value       int
	status      int    // 0: keep
	body        string // "" with hasBody false: keep
	hasBody     bool
	format      string // body_format_override text; "" for none
	contentType string
	headers     []headerToAdd
}

// compileLocalReply compiles c's mappers, refusing what envoysim does not
// model (any other filter, a top-level body_format, formatters other
// than %LOCAL_REPLY_BODY%).
func compileLocalReply(c *hcmv3.LocalReplyConfig) ([]localReplyMapper, error) {
	if c == nil {
		return nil, nil
	}
	var errs []error
	if c.GetBodyFormat() != nil {
		errs = append(errs, errors.New("local_reply_config.body_format is not supported by envoysim (use a mapper's body_format_override)"))
	}
	var out []localReplyMapper
	for i, m := range c.GetMappers() {
		where := fmt.Sprintf("local_reply_config.mappers[%d]", i)
		sc := m.GetFilter().GetStatusCodeFilter()
		if sc == nil {
			errs = append(errs, fmt.Errorf("%s.filter: only status_code_filter is supported by envoysim", where))
			continue
		}
		lm := localReplyMapper{op: sc.GetComparison().GetOp(), value: int(sc.GetComparison().GetValue().GetDefaultValue())}
		if s := m.GetStatusCode(); s != nil {
			lm.status = int(s.GetValue())
		}
		if b := m.GetBody(); b != nil {
			if b.GetFilename() != "" || b.GetEnvironmentVariable() != "" {
				errs = append(errs, fmt.Errorf("%s.body: only inline_string or inline_bytes is supported by envoysim", where))
			}
			lm.body, lm.hasBody = b.GetInlineString()+string(b.GetInlineBytes()), true
		}
		if f := m.GetBodyFormatOverride(); f != nil {
			var text string
			src, ok := f.GetFormat().(*corev3.SubstitutionFormatString_TextFormatSource)
			if ok {
				text = src.TextFormatSource.GetInlineString()
			}
			if text == "" {
				errs = append(errs, fmt.Errorf("%s.body_format_override: only text_format_source.inline_string is supported by envoysim", where))
			}
			if rest := strings.ReplaceAll(text, "%LOCAL_REPLY_BODY%", ""); strings.Contains(rest, "%") {
				errs = append(errs, fmt.Errorf("%s.body_format_override: %q: only %%LOCAL_REPLY_BODY%% is modelled by envoysim", where, text))
			}
			lm.format, lm.contentType = text, f.GetContentType()
			if lm.contentType == "" {
				lm.contentType = "text/plain"
			}
		}
		for j, o := range m.GetHeadersToAdd() {
			f, err := parseFormat(o.GetHeader().GetValue())
			if err != nil {
				errs = append(errs, fmt.Errorf("%s.headers_to_add[%d]: %w", where, j, err))
				continue
			}
			lm.headers = append(lm.headers, headerToAdd{key: strings.ToLower(o.GetHeader().GetKey()), value: f, action: o.GetAppendAction()})
		}
		out = append(out, lm)
	}
	return out, errors.Join(errs...)
}

// matches is the status_code_filter: the reply's code compared with the
// value (ComparisonFilter: EQ, GE, LE).
func (m *localReplyMapper) matches(code int) bool {
	switch m.op {
	case accesslogv3.ComparisonFilter_GE:
		return code >= m.value
	case accesslogv3.ComparisonFilter_LE:
		return code <= m.value
	default:
		return code == m.value
	}
}

// rewriteLocalReply applies the first mapper matching the reply's status
// (LocalReplyImpl::rewrite, after the route's and the filter's header
// changes): its headers, status, body and body format. It returns the
// body to send.
func (s *stream) rewriteLocalReply(h *headerMap, body string) string {
	code, _ := strconv.Atoi(h.value(":status"))
	for i := range s.hcm.localReply {
		m := &s.hcm.localReply[i]
		if !m.matches(code) {
			continue
		}
		for _, a := range m.headers {
			v := a.value.format(s.formatContext())
			h.set(a.key, v)
		}
		if m.status != 0 {
			h.set(":status", strconv.Itoa(m.status))
		}
		if m.hasBody {
			body = m.body
		}
		if m.format != "" {
			body = strings.ReplaceAll(m.format, "%LOCAL_REPLY_BODY%", body)
			h.set("content-type", m.contentType)
		}
		break
	}
	return body
}
