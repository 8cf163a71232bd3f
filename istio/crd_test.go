package istio

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	"sigs.k8s.io/yaml"
)

// crdSchema is the part of an OpenAPI v3 schema with Kubernetes
// extensions that Istio's CRDs use.
type crdSchema struct {
	Type                 string                `json:"type"`
	Format               string                `json:"format"`
	Properties           map[string]*crdSchema `json:"properties"`
	AdditionalProperties *crdSchema            `json:"additionalProperties"`
	Items                *crdSchema            `json:"items"`
	Required             []string              `json:"required"`
	Enum                 []any                 `json:"enum"`
	Minimum              *float64              `json:"minimum"`
	Maximum              *float64              `json:"maximum"`
	MinLength            *int                  `json:"minLength"`
	MaxLength            *int                  `json:"maxLength"`
	MaxItems             *int                  `json:"maxItems"`
	MaxProperties        *int                  `json:"maxProperties"`
	Pattern              string                `json:"pattern"`
	PreserveUnknown      bool                  `json:"x-kubernetes-preserve-unknown-fields"`
	Validations          []struct {
		Rule string `json:"rule"`
	} `json:"x-kubernetes-validations"`
}

// crdSpecs reads the spec schemas of Istio's networking CRDs, by
// "apiVersion kind", from the CRDs istio.io/api ships
// (kubernetes/customresourcedefinitions.gen.yaml beside its Go sources in
// the module cache). The test is skipped when that file is not there.
func crdSpecs(t *testing.T) map[string]*crdSchema {
	t.Helper()
	// The source file of an istio.io/api function locates the module.
	fn := runtime.FuncForPC(reflect.ValueOf((*networkingv1alpha3.EnvoyFilter).Reset).Pointer())
	file, _ := fn.FileLine(fn.Entry())
	path := filepath.Join(filepath.Dir(file), "..", "..", "kubernetes", "customresourcedefinitions.gen.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("Istio's CRDs are not beside istio.io/api's sources (built with -trimpath?): %v", err)
	}
	specs := map[string]*crdSchema{}
	for doc := range bytes.SplitSeq(data, []byte("\n---\n")) {
		if !bytes.Contains(doc, []byte("group: networking.istio.io")) {
			continue
		}
		var crd struct {
			Spec struct {
				Names    struct{ Kind string } `json:"names"`
				Versions []struct {
					Name   string `json:"name"`
					Schema struct {
						OpenAPIV3Schema crdSchema `json:"openAPIV3Schema"`
					} `json:"schema"`
				} `json:"versions"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(doc, &crd); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for _, v := range crd.Spec.Versions {
			specs["networking.istio.io/"+v.Name+" "+crd.Spec.Names.Kind] = v.Schema.OpenAPIV3Schema.Properties["spec"]
		}
	}
	return specs
}

// TestCRDSchemas checks every rendered spec against the schema of its
// CRD: what the Kubernetes API server checks before istiod sees anything
// (types, formats, enums, bounds, unknown fields, and the CEL rules these
// schemas use).
func TestCRDSchemas(t *testing.T) {
	specs := crdSpecs(t)
	c := loadConfig(t, exampleConfig)
	w := demandWeights(t, c)
	cases := map[string]Options{"both sources with gateways": both}
	for _, ex := range examples {
		cases[ex.file] = ex.opts
	}
	for name, o := range cases {
		t.Run(name, func(t *testing.T) {
			out, err := Render(c, w, o)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range decodeAll(t, out) {
				s := specs[d.APIVersion+" "+d.Kind]
				if s == nil {
					t.Fatalf("no CRD schema for %s %s", d.APIVersion, d.Kind)
				}
				var v any
				if err := json.Unmarshal(d.Spec, &v); err != nil {
					t.Fatal(err)
				}
				for _, e := range checkSchema(d.Kind+" "+d.Metadata.Name+": spec", v, s) {
					t.Error(e)
				}
			}
		})
	}
}

// checkSchema returns every violation of s by v, each with its path.
func checkSchema(path string, v any, s *crdSchema) []string {
	var errs []string
	bad := func(format string, a ...any) { errs = append(errs, path+": "+fmt.Sprintf(format, a...)) }
	switch x := v.(type) {
	case map[string]any:
		if s.Type != "object" {
			bad("an object where the schema wants %s", s.Type)
			return errs
		}
		for _, k := range slices.Sorted(maps.Keys(x)) {
			switch {
			case s.Properties[k] != nil:
				errs = append(errs, checkSchema(path+"."+k, x[k], s.Properties[k])...)
			case s.AdditionalProperties != nil:
				errs = append(errs, checkSchema(path+"["+k+"]", x[k], s.AdditionalProperties)...)
			case !s.PreserveUnknown:
				bad("unknown field %q", k)
			}
		}
		for _, r := range s.Required {
			if _, ok := x[r]; !ok {
				bad("required field %q is missing", r)
			}
		}
		if s.MaxProperties != nil && len(x) > *s.MaxProperties {
			bad("%d properties, at most %d", len(x), *s.MaxProperties)
		}
	case []any:
		if s.Type != "array" {
			bad("an array where the schema wants %s", s.Type)
			return errs
		}
		if s.MaxItems != nil && len(x) > *s.MaxItems {
			bad("%d items, at most %d", len(x), *s.MaxItems)
		}
		for i, item := range x {
			errs = append(errs, checkSchema(fmt.Sprintf("%s[%d]", path, i), item, s.Items)...)
		}
	case string:
		if s.Type != "string" {
			bad("a string where the schema wants %s", s.Type)
		}
		if (s.MinLength != nil && len(x) < *s.MinLength) || (s.MaxLength != nil && len(x) > *s.MaxLength) {
			bad("%q has a length out of bounds", x)
		}
		if s.Pattern != "" && !regexp.MustCompile(s.Pattern).MatchString(x) {
			bad("%q does not match %s", x, s.Pattern)
		}
	case float64:
		switch {
		case s.Type == "integer" && x != math.Trunc(x), s.Type != "integer" && s.Type != "number":
			bad("%v where the schema wants %s", x, s.Type)
		case s.Format == "int32" && (x < math.MinInt32 || x > math.MaxInt32):
			bad("%v is not an int32", x)
		case (s.Minimum != nil && x < *s.Minimum) || (s.Maximum != nil && x > *s.Maximum):
			bad("%v is out of bounds", x)
		}
	case bool:
		if s.Type != "boolean" {
			bad("a boolean where the schema wants %s", s.Type)
		}
	}
	if len(s.Enum) > 0 && !slices.Contains(s.Enum, v) {
		bad("%v is not one of %v", v, s.Enum)
	}
	for _, val := range s.Validations {
		if msg := celRule(val.Rule, v); msg != "" {
			bad("%s (rule %s)", msg, val.Rule)
		}
	}
	return errs
}

// celRule evaluates the CEL rules of these schemas, "" when v passes.
func celRule(rule string, v any) string {
	str, _ := v.(string)
	obj, _ := v.(map[string]any)
	switch rule {
	case "duration(self) >= duration('1ms')":
		if d, err := time.ParseDuration(str); err != nil || d < time.Millisecond {
			return fmt.Sprintf("%q is not a duration of at least 1ms", str)
		}
	case `!self.contains("*")`:
		if strings.Contains(str, "*") {
			return fmt.Sprintf("%q contains *", str)
		}
	case `self.all(key, !key.contains("*"))`, `self.all(key, key.size() != 0)`:
		for k := range obj {
			if k == "" || strings.Contains(k, "*") {
				return fmt.Sprintf("key %q", k)
			}
		}
	case "0 < self && self <= 65535":
		if n, _ := v.(float64); n <= 0 || n > 65535 {
			return fmt.Sprintf("%v is not a port", v)
		}
	case "self.size() == 0":
		if b, _ := json.Marshal(v); len(b) > 2 {
			return "not empty"
		}
	case "(has(self.workloadSelector) ? 1 : 0) + (has(self.targetRefs) ? 1 : 0) <= 1":
		_, sel := obj["workloadSelector"]
		_, refs := obj["targetRefs"]
		if sel && refs {
			return "both workloadSelector and targetRefs"
		}
	case `has(self.context) ? ((self.context == "WAYPOINT") ? has(self.waypoint) : !has(self.waypoint)) : !has(self.waypoint)`:
		_, wp := obj["waypoint"]
		if wp != (obj["context"] == "WAYPOINT") {
			return "waypoint and context disagree"
		}
	default:
		return "a rule this test cannot evaluate: teach it"
	}
	return ""
}
