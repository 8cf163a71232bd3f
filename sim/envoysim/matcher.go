package envoysim

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
)

// compileRegex compiles a RegexMatcher for full-string matching, as Envoy's
// RE2 engine does (Regex::CompiledGoogleReMatcher::match uses RE2::FullMatch,
// source/common/common/regex.cc). Go's regexp implements RE2 syntax.
func compileRegex(m *matcherv3.RegexMatcher) (*regexp.Regexp, error) {
	re, err := regexp.Compile(`^(?:` + m.GetRegex() + `)$`)
	if err != nil {
		return nil, fmt.Errorf("regex %q: %w", m.GetRegex(), err)
	}
	return re, nil
}

// stringKind is the oneof case of a StringMatcher.
type stringKind int

const (
	strExact stringKind = iota
	strPrefix
	strSuffix
	strContains
	strRegex
)

// stringMatcher is a compiled envoy.type.matcher.v3.StringMatcher
// (source/common/common/matchers.h StringMatcherImpl): ignore_case applies to
// exact, prefix, suffix and contains, and has no effect on safe_regex.
type stringMatcher struct {
	kind       stringKind
	s          string
	re         *regexp.Regexp
	ignoreCase bool
}

func compileStringMatcher(m *matcherv3.StringMatcher) (*stringMatcher, error) {
	sm := &stringMatcher{ignoreCase: m.GetIgnoreCase()}
	switch p := m.GetMatchPattern().(type) {
	case *matcherv3.StringMatcher_Exact:
		sm.kind, sm.s = strExact, p.Exact
	case *matcherv3.StringMatcher_Prefix:
		sm.kind, sm.s = strPrefix, p.Prefix
	case *matcherv3.StringMatcher_Suffix:
		sm.kind, sm.s = strSuffix, p.Suffix
	case *matcherv3.StringMatcher_Contains:
		sm.kind, sm.s = strContains, p.Contains
	case *matcherv3.StringMatcher_SafeRegex:
		re, err := compileRegex(p.SafeRegex)
		if err != nil {
			return nil, err
		}
		sm.kind, sm.re = strRegex, re
	default:
		return nil, errors.New("string matcher: match_pattern must be exact, prefix, suffix, contains or safe_regex")
	}
	if sm.ignoreCase && sm.kind != strRegex {
		sm.s = strings.ToLower(sm.s)
	}
	return sm, nil
}

func (m *stringMatcher) match(v string) bool {
	if m.ignoreCase && m.kind != strRegex {
		v = strings.ToLower(v)
	}
	switch m.kind {
	case strExact:
		return v == m.s
	case strPrefix:
		return strings.HasPrefix(v, m.s)
	case strSuffix:
		return strings.HasSuffix(v, m.s)
	case strContains:
		return strings.Contains(v, m.s)
	default:
		return m.re.MatchString(v)
	}
}

// headerMatcher is a compiled route HeaderMatcher with the semantics of
// HeaderUtility::matchHeaders (source/common/http/header_utility.cc):
// multiple values are joined with ","; a missing header matches only a
// present_match that expects absence (modulo invert_match), unless
// treat_missing_header_as_empty makes it match as ""; otherwise the result is
// match XOR invert_match.
type headerMatcher struct {
	name           string
	present        *bool // present_match
	value          func(string) bool
	invert         bool
	missingAsEmpty bool
}

func compileHeaderMatcher(m *routev3.HeaderMatcher) (*headerMatcher, error) {
	hm := &headerMatcher{
		name:           strings.ToLower(m.GetName()),
		invert:         m.GetInvertMatch(),
		missingAsEmpty: m.GetTreatMissingHeaderAsEmpty(),
	}
	switch s := m.GetHeaderMatchSpecifier().(type) {
	case *routev3.HeaderMatcher_PresentMatch:
		p := s.PresentMatch
		hm.present = &p
	case *routev3.HeaderMatcher_StringMatch:
		sm, err := compileStringMatcher(s.StringMatch)
		if err != nil {
			return nil, fmt.Errorf("header %q: %w", hm.name, err)
		}
		hm.value = sm.match
	case *routev3.HeaderMatcher_ExactMatch:
		// HeaderDataExactMatch: an empty expected value matches any value.
		want := s.ExactMatch //nolint:staticcheck // deprecated matchers are still honoured by Envoy
		hm.value = func(v string) bool { return want == "" || v == want }
	case *routev3.HeaderMatcher_PrefixMatch:
		want := s.PrefixMatch //nolint:staticcheck // deprecated matchers are still honoured by Envoy
		hm.value = func(v string) bool { return strings.HasPrefix(v, want) }
	case *routev3.HeaderMatcher_SuffixMatch:
		want := s.SuffixMatch //nolint:staticcheck // deprecated matchers are still honoured by Envoy
		hm.value = func(v string) bool { return strings.HasSuffix(v, want) }
	case *routev3.HeaderMatcher_ContainsMatch:
		want := s.ContainsMatch //nolint:staticcheck // deprecated matchers are still honoured by Envoy
		hm.value = func(v string) bool { return strings.Contains(v, want) }
	case *routev3.HeaderMatcher_SafeRegexMatch:
		re, err := compileRegex(s.SafeRegexMatch) //nolint:staticcheck // deprecated matchers are still honoured by Envoy
		if err != nil {
			return nil, fmt.Errorf("header %q: %w", hm.name, err)
		}
		hm.value = re.MatchString
	case *routev3.HeaderMatcher_RangeMatch:
		lo, hi := s.RangeMatch.GetStart(), s.RangeMatch.GetEnd()
		hm.value = func(v string) bool {
			n, err := strconv.ParseInt(v, 10, 64)
			return err == nil && n >= lo && n < hi
		}
	default:
		// No specifier: HeaderMatcher with only a name behaves as present_match: true.
		p := true
		hm.present = &p
	}
	return hm, nil
}

func (m *headerMatcher) match(h *headerMap) bool {
	v, ok := h.joined(m.name)
	if m.present != nil {
		return (ok == *m.present) != m.invert
	}
	if !ok {
		if !m.missingAsEmpty {
			return false
		}
		v = ""
	}
	return m.value(v) != m.invert
}

// matchAllHeaders reports whether every matcher matches.
func matchAllHeaders(ms []*headerMatcher, h *headerMap) bool {
	for _, m := range ms {
		if !m.match(h) {
			return false
		}
	}
	return true
}
