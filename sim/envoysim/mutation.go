package envoysim

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	mutationrulesv3 "github.com/envoyproxy/go-control-plane/envoy/config/common/mutation_rules/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// checkOp is a header mutation operation (mutation_rules.h CheckOperation).
type checkOp int

const (
	opSet checkOp = iota
	opAppend
	opRemove
)

// checkResult is the outcome of a mutation check.
type checkResult int

const (
	checkOK checkResult = iota
	checkIgnore
	checkFail
)

// defaultMaxHeadersCount is the HCM max_headers_count default, the limit
// MutationUtils checks mutations against.
const defaultMaxHeadersCount = 100

// defaultMaxRequestHeadersKb is the HCM max_request_headers_kb default.
const defaultMaxRequestHeadersKb = 60

// mutationChecker is Filters::Common::MutationRules::Checker
// (source/extensions/filters/common/mutation_rules/mutation_rules.cc). With
// no rules: "host", ":authority", ":method" and ":scheme" may not be
// changed, nor "x-envoy-*"; ':'-prefixed headers may not be appended; a
// ':'-prefixed header or "host" may never be removed. A refused mutation is
// ignored, or an error when disallow_is_error.
type mutationChecker struct {
	allowAllRouting bool
	allowEnvoy      bool
	disallowSystem  bool
	disallowAll     bool
	disallowIsError bool
	allowRe         *regexp.Regexp
	disallowRe      *regexp.Regexp
}

func compileMutationChecker(r *mutationrulesv3.HeaderMutationRules) (*mutationChecker, error) {
	c := &mutationChecker{
		allowAllRouting: r.GetAllowAllRouting().GetValue(),
		allowEnvoy:      r.GetAllowEnvoy().GetValue(),
		disallowSystem:  r.GetDisallowSystem().GetValue(),
		disallowAll:     r.GetDisallowAll().GetValue(),
		disallowIsError: r.GetDisallowIsError().GetValue(),
	}
	var errs []error
	var err error
	if r.GetAllowExpression() != nil {
		if c.allowRe, err = compileRegex(r.GetAllowExpression()); err != nil {
			errs = append(errs, fmt.Errorf("mutation_rules.allow_expression: %w", err))
		}
	}
	if r.GetDisallowExpression() != nil {
		if c.disallowRe, err = compileRegex(r.GetDisallowExpression()); err != nil {
			errs = append(errs, fmt.Errorf("mutation_rules.disallow_expression: %w", err))
		}
	}
	return c, errors.Join(errs...)
}

func (c *mutationChecker) check(op checkOp, name, value string) checkResult {
	if c.isAllowed(op, name) && (op == opRemove || isValidMutationValue(name, value)) {
		return checkOK
	}
	if c.disallowIsError {
		return checkFail
	}
	return checkIgnore
}

func (c *mutationChecker) isAllowed(op checkOp, name string) bool {
	if op == opRemove && !isModifiableHeader(name) {
		return false
	}
	if c.disallowRe != nil && c.disallowRe.MatchString(name) {
		return false
	}
	if c.allowRe != nil && c.allowRe.MatchString(name) {
		return true
	}
	if c.disallowAll {
		return false
	}
	if !c.allowAllRouting {
		switch name {
		case "host", ":authority", ":method", ":scheme":
			return false
		}
	}
	if strings.HasPrefix(name, ":") && (op == opAppend || c.disallowSystem) {
		return false
	}
	if !c.allowEnvoy && strings.HasPrefix(name, "x-envoy") {
		return false
	}
	return true
}

// isValidMutationValue is Checker::isValidValue.
func isValidMutationValue(name, value string) bool {
	if !strings.HasPrefix(name, ":") && !headerValueIsValid(value) {
		return false
	}
	switch name {
	case "host", ":authority":
		return value != "" && headerValueIsValid(value) && !strings.ContainsAny(value, " /?#@")
	case ":scheme":
		return value == "http" || value == "https"
	case ":status":
		n, err := strconv.ParseUint(value, 10, 32)
		return err == nil && n >= 200
	}
	return true
}

// mutationOutcome counts what applyHeaderMutation did.
type mutationOutcome struct {
	rejected int // mutations refused by the rules (stat rejected_header_mutations)
}

// applyHeaderMutation is MutationUtils::applyHeaderMutations
// (source/extensions/filters/http/ext_proc/mutation_utils.cc) for the
// upstream behaviour: removals first, then set_headers in order. Only
// raw_value is read (send_header_raw_value); value and raw_value both set is
// an error; append (default false) appends when the header exists, else
// sets; append_action is not read by ext_proc. Any error is returned and the
// caller turns it into an error response.
func (c *mutationChecker) applyHeaderMutation(h *headerMap, m *extprocv3.HeaderMutation) (mutationOutcome, error) {
	var out mutationOutcome
	if len(m.GetRemoveHeaders()) > defaultMaxHeadersCount || len(m.GetSetHeaders()) > defaultMaxHeadersCount {
		out.rejected++
		return out, fmt.Errorf("header mutation remove header count %d or set header count %d exceed the HCM header count limit %d",
			len(m.GetRemoveHeaders()), len(m.GetSetHeaders()), defaultMaxHeadersCount)
	}
	for _, name := range m.GetRemoveHeaders() {
		if !headerNameIsValid(name) {
			out.rejected++
			return out, errors.New("invalid character in remove_headers mutation")
		}
		name = strings.ToLower(name)
		switch c.check(opRemove, name, "") {
		case checkOK:
			h.remove(name)
		case checkIgnore:
			out.rejected++
		case checkFail:
			out.rejected++
			return out, fmt.Errorf("invalid attempt to remove %s", name)
		}
	}
	for _, sh := range m.GetSetHeaders() {
		hv := sh.GetHeader()
		if hv == nil {
			continue
		}
		if hv.GetValue() != "" && len(hv.GetRawValue()) > 0 {
			out.rejected++
			return out, errors.New("only one of value or raw_value in the HeaderValue message should be set")
		}
		value := string(hv.GetRawValue())
		if !headerNameIsValid(hv.GetKey()) || !headerValueIsValid(value) {
			out.rejected++
			return out, errors.New("invalid character in set_headers mutation")
		}
		name := strings.ToLower(hv.GetKey())
		appendMode := sh.GetAppend().GetValue() //nolint:staticcheck // ext_proc reads the deprecated append only

		op := opSet
		if appendMode && h.has(name) {
			op = opAppend
		}
		switch c.check(op, name, value) {
		case checkOK:
			if appendMode {
				h.add(name, value)
			} else {
				h.set(name, value)
			}
		case checkIgnore:
			out.rejected++
		case checkFail:
			out.rejected++
			return out, fmt.Errorf("invalid attempt to modify %s", name)
		}
	}
	if len(h.entries) > defaultMaxHeadersCount || h.byteSize() > defaultMaxRequestHeadersKb*1024 {
		out.rejected++
		return out, fmt.Errorf("header mutation causes end result header count %d or header size %d bytes, exceeding the count limit %d or the size limit %d kilobytes",
			len(h.entries), h.byteSize(), defaultMaxHeadersCount, defaultMaxRequestHeadersKb)
	}
	return out, nil
}
