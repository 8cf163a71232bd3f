package weights

import (
	"encoding/json"
	"fmt"
)

// Priority is a request's importance when capacity runs short: sheddable
// requests are shed first, critical ones last.
type Priority uint8

// Priorities, from most to least important.
const (
	Critical Priority = iota
	Standard
	Sheddable
	numPriorities
)

// Priorities lists every priority, most important first.
var Priorities = [numPriorities]Priority{Critical, Standard, Sheddable}

var priorityNames = [numPriorities]string{"critical", "standard", "sheddable"}

// String returns the header form: "critical", "standard" or "sheddable".
func (p Priority) String() string {
	if p < numPriorities {
		return priorityNames[p]
	}
	return fmt.Sprintf("priority(%d)", uint8(p))
}

// ParsePriority reads the header form of a priority.
func ParsePriority(s string) (Priority, error) {
	for i, n := range priorityNames {
		if s == n {
			return Priority(i), nil
		}
	}
	return 0, fmt.Errorf("unknown priority %q: want critical, standard or sheddable", s)
}

// MarshalText writes the header form.
func (p Priority) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// ShedFractions is the fraction of requests to shed, per priority, each in
// [0, 1].
type ShedFractions [numPriorities]float64

// MarshalJSON writes {"critical": f, "standard": f, "sheddable": f}.
func (s ShedFractions) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, `{"critical":%g,"standard":%g,"sheddable":%g}`, s[Critical], s[Standard], s[Sheddable]), nil
}

// UnmarshalJSON reads the form MarshalJSON writes; a missing priority is 0
// and an unknown one is an error.
func (s *ShedFractions) UnmarshalJSON(b []byte) error {
	var m map[string]float64
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("shed fractions: %w", err)
	}
	var out ShedFractions
	for k, v := range m {
		p, err := ParsePriority(k)
		if err != nil {
			return fmt.Errorf("shed fractions: %w", err)
		}
		out[p] = v
	}
	*s = out
	return nil
}

// UnmarshalText reads the header form.
func (p *Priority) UnmarshalText(b []byte) error {
	v, err := ParsePriority(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}
