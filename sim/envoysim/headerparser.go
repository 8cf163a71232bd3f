package envoysim

import (
	"errors"
	"fmt"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
)

// headerToAdd is one compiled HeaderValueOption.
type headerToAdd struct {
	key       string
	value     *formatter
	action    corev3.HeaderValueOption_HeaderAppendAction
	keepEmpty bool
}

// headerParser is a compiled pair of *_headers_to_add / *_headers_to_remove
// lists, Envoy's Router::HeaderParser (source/common/router/header_parser.cc).
// A nil parser does nothing.
type headerParser struct {
	add    []headerToAdd
	remove []string
}

// compileHeaderParser builds a parser, refusing what HeaderParser::configure
// refuses: pseudo headers and "host" (in both lists), and "append" together
// with a non-default "append_action".
func compileHeaderParser(add []*corev3.HeaderValueOption, remove []string) (*headerParser, error) {
	if len(add) == 0 && len(remove) == 0 {
		return nil, nil
	}
	p := &headerParser{}
	var errs []error
	for i, opt := range add {
		key := strings.ToLower(opt.GetHeader().GetKey())
		if !isModifiableHeader(key) {
			errs = append(errs, fmt.Errorf("headers_to_add[%d] %q: ':'-prefixed or host headers may not be modified", i, key))
			continue
		}
		action := opt.GetAppendAction()
		//nolint:staticcheck // deprecated append is still honoured (header_parser.cc)
		if appendOpt := opt.GetAppend(); appendOpt != nil {
			// header_parser.cc: 'append' is set; 'append_action' must keep its default.
			if action != corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD {
				errs = append(errs, fmt.Errorf("headers_to_add[%d] %q: both append and append_action are set and it's not allowed", i, key))
				continue
			}
			if !appendOpt.GetValue() {
				action = corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
			}
		}
		f, err := parseFormat(opt.GetHeader().GetValue())
		if err != nil {
			errs = append(errs, fmt.Errorf("headers_to_add[%d] %q: %w", i, key, err))
			continue
		}
		p.add = append(p.add, headerToAdd{key: key, value: f, action: action, keepEmpty: opt.GetKeepEmptyValue()})
	}
	for i, key := range remove {
		key = strings.ToLower(key)
		if !isModifiableHeader(key) {
			errs = append(errs, fmt.Errorf("headers_to_remove[%d] %q: ':'-prefixed or host headers may not be removed", i, key))
			continue
		}
		p.remove = append(p.remove, key)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

// evaluate applies the parser to h, exactly as HeaderParser::evaluateHeaders:
// removals first; then every value is formatted against the headers as they
// were before any addition; an empty value is skipped unless keep_empty_value;
// then all overwrites, then all appends.
func (p *headerParser) evaluate(h *headerMap, fc formatContext) {
	if p == nil {
		return
	}
	for _, key := range p.remove {
		h.remove(key)
	}
	var toAdd, toOverwrite []header
	for _, a := range p.add {
		v := a.value.format(fc)
		if v == "" && !a.keepEmpty {
			continue
		}
		switch a.action {
		case corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD:
			toAdd = append(toAdd, header{a.key, v})
		case corev3.HeaderValueOption_ADD_IF_ABSENT:
			if !h.has(a.key) {
				toAdd = append(toAdd, header{a.key, v})
			}
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS:
			if h.has(a.key) {
				toOverwrite = append(toOverwrite, header{a.key, v})
			}
		case corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD:
			toOverwrite = append(toOverwrite, header{a.key, v})
		}
	}
	for _, e := range toOverwrite {
		h.set(e.key, e.value)
	}
	for _, e := range toAdd {
		h.add(e.key, e.value)
	}
}
