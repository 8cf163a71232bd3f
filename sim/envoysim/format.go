package envoysim

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// fmtKind is one kind of formatter part.
type fmtKind int

const (
	fmtLiteral fmtKind = iota
	fmtUpstreamHost
	fmtUpstreamCluster
	fmtReq
)

// fmtPart is a literal or one %OPERATOR%.
type fmtPart struct {
	kind   fmtKind
	lit    string
	names  []string // REQ: main header, then the alternative
	maxLen int      // REQ: ":N" truncation, 0 for none
}

// formatter is a compiled header value of the substitution format language
// (https://www.envoyproxy.io/docs/envoy/latest/configuration/observability/access_log/usage#command-operators),
// restricted to the operators envoysim models: %UPSTREAM_HOST%,
// %UPSTREAM_CLUSTER%, %REQ(name)% (with "?alternative" and ":max_length"),
// literal text and "%%" for a literal percent sign.
type formatter struct {
	parts []fmtPart
}

// formatContext is what the formatter operators read.
type formatContext struct {
	req             *headerMap // request headers, for %REQ()%
	upstreamHost    string     // ip:port of the selected upstream host, "" before selection
	upstreamCluster string     // name of the selected cluster, "" without one
}

// errFormatOperator marks a %OPERATOR% envoysim does not model.
var errFormatOperator = errors.New("operator not modelled by envoysim (supported: %UPSTREAM_HOST%, %UPSTREAM_CLUSTER%, %REQ(name)%, %%)")

// parseFormat compiles s. It refuses every operator other than the modelled
// ones, and an unterminated "%", as Envoy's SubstitutionFormatParser refuses
// unknown commands at load time (source/common/formatter/substitution_formatter.cc).
func parseFormat(s string) (*formatter, error) {
	f := &formatter{}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			f.parts = append(f.parts, fmtPart{kind: fmtLiteral, lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			lit.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '%' {
			lit.WriteByte('%')
			i++
			continue
		}
		end := strings.IndexByte(s[i+1:], '%')
		if end < 0 {
			return nil, fmt.Errorf("format %q: unterminated %% at position %d", s, i)
		}
		cmd := s[i+1 : i+1+end]
		part, err := parseFormatCommand(cmd)
		if err != nil {
			return nil, fmt.Errorf("format %q: %%%s%%: %w", s, cmd, err)
		}
		flush()
		f.parts = append(f.parts, part)
		i += end + 1
	}
	flush()
	return f, nil
}

func parseFormatCommand(cmd string) (fmtPart, error) {
	switch cmd {
	case "UPSTREAM_HOST":
		return fmtPart{kind: fmtUpstreamHost}, nil
	case "UPSTREAM_CLUSTER":
		return fmtPart{kind: fmtUpstreamCluster}, nil
	}
	if !strings.HasPrefix(cmd, "REQ(") {
		return fmtPart{}, errFormatOperator
	}
	closeIdx := strings.IndexByte(cmd, ')')
	if closeIdx < 0 {
		return fmtPart{}, errors.New("REQ without closing parenthesis")
	}
	arg := cmd[len("REQ("):closeIdx]
	rest := cmd[closeIdx+1:]
	part := fmtPart{kind: fmtReq}
	main, alt, hasAlt := strings.Cut(arg, "?")
	if main == "" || (hasAlt && alt == "") {
		return fmtPart{}, errors.New("REQ needs a header name")
	}
	part.names = []string{strings.ToLower(main)}
	if hasAlt {
		part.names = append(part.names, strings.ToLower(alt))
	}
	if rest != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(rest, ":"))
		if !strings.HasPrefix(rest, ":") || err != nil || n <= 0 {
			return fmtPart{}, fmt.Errorf("REQ length %q is not a positive integer", rest)
		}
		part.maxLen = n
	}
	return part, nil
}

// format renders the value. A missing header renders as "" (header values
// replace unknown values with the empty string, not "-": HeaderValue docs
// https://www.envoyproxy.io/docs/envoy/latest/api-v3/config/core/v3/base.proto#config-core-v3-headervalue).
func (f *formatter) format(fc formatContext) string {
	var b strings.Builder
	for _, p := range f.parts {
		switch p.kind {
		case fmtLiteral:
			b.WriteString(p.lit)
		case fmtUpstreamHost:
			b.WriteString(fc.upstreamHost)
		case fmtUpstreamCluster:
			b.WriteString(fc.upstreamCluster)
		case fmtReq:
			b.WriteString(p.request(fc.req))
		}
	}
	return b.String()
}

func (p fmtPart) request(h *headerMap) string {
	if h == nil {
		return ""
	}
	for _, name := range p.names {
		if v, ok := h.first(name); ok {
			if p.maxLen > 0 && len(v) > p.maxLen {
				v = v[:p.maxLen]
			}
			return v
		}
	}
	return ""
}
