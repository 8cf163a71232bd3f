package istio

import (
	"fmt"
	"regexp"
	"strings"
)

// Kubernetes name rules (k8s.io/apimachinery/pkg/util/validation).
var (
	labelRe      = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	subdomainRe  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	labelValueRe = regexp.MustCompile(`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`)
)

// validLabel: a DNS-1123 label (namespaces, service names).
func validLabel(s string) bool { return len(s) <= 63 && labelRe.MatchString(s) }

// validSubdomain: a DNS-1123 subdomain (object names).
func validSubdomain(s string) bool { return len(s) <= 253 && subdomainRe.MatchString(s) }

func validLabelValue(s string) bool { return len(s) <= 63 && labelValueRe.MatchString(s) }

// validLabelKey: [prefix/]name, prefix a DNS subdomain, name a label value
// that is not empty.
func validLabelKey(k string) bool {
	prefix, name, ok := strings.Cut(k, "/")
	if !ok {
		prefix, name = "", k
	}
	return name != "" && validLabelValue(name) && (!ok || validSubdomain(prefix))
}

// validHost: a lowercase DNS name, optionally with a leading "*." label,
// or "*".
func validHost(h string) bool {
	if h == "*" {
		return true
	}
	return validSubdomain(strings.TrimPrefix(h, "*."))
}

// objectName is "ilb-" and name, lowercased with '_' as '-': ILB names
// (sources, clusters) allow upper case and '_', Kubernetes names do not.
func objectName(name string) (string, error) {
	n := "ilb-" + strings.ReplaceAll(strings.ToLower(name), "_", "-")
	if !validSubdomain(n) {
		return "", fmt.Errorf("%q cannot name a Kubernetes object (%q is not a DNS-1123 subdomain)", name, n)
	}
	return n, nil
}

// serviceNamespace returns the namespace of a Kubernetes service host
// name.namespace.svc[.domain], or "".
func serviceNamespace(host string) string {
	parts := strings.Split(strings.TrimSuffix(host, "."), ".")
	if len(parts) >= 3 && parts[2] == "svc" && validLabel(parts[1]) {
		return parts[1]
	}
	return ""
}
