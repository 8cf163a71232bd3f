package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestEveryYAMLValidates walks envoy/ and examples/ and checks each YAML
// with the command that owns its kind, so a new file cannot slip past:
// Envoy bootstraps and resource files pass `ilb validate --envoy` with no
// warning, ILB configurations pass `ilb validate --config`, compose files
// name files that exist and an Envoy that ILB supports; Kubernetes
// manifests (examples/istio) are checked by the istio package's tests
// against the CRD schemas; demand files by `ilb solve`'s tests.
func TestEveryYAMLValidates(t *testing.T) {
	var files []string
	for _, root := range []string{"../../envoy", "../../examples"} {
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml")) {
				files = append(files, p)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	kinds := map[string]int{}
	for _, f := range files {
		t.Run(strings.TrimPrefix(f, "../../"), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var top map[string]any
			if err := yaml.Unmarshal(firstDoc(data), &top); err != nil {
				t.Fatalf("not YAML: %v", err)
			}
			switch {
			case top["apiVersion"] != nil:
				kinds["kubernetes"]++
			case top["services"] != nil:
				kinds["compose"]++
				checkCompose(t, f, data)
			case top["demand"] != nil:
				kinds["demand"]++
			case top["groups"] != nil:
				// Prometheus rules: test/observability_test.go checks them
				// (strict structure, PromQL, documented metrics).
				kinds["prometheus-rules"]++
			case top["sources"] != nil:
				kinds["ilb"]++
				if out, _, err := runCmd(t, "validate", "--config", f); err != nil {
					t.Errorf("ilb validate --config: %v\n%s", err, out)
				}
			default:
				kinds["envoy"]++
				out, _, err := runCmd(t, "validate", "--envoy", f)
				if err != nil || !strings.Contains(out, "(0 warnings)") {
					t.Errorf("ilb validate --envoy: %v\n%s", err, out)
				}
			}
		})
	}
	if kinds["envoy"] < 5 || kinds["ilb"] < 3 || kinds["compose"] < 1 {
		t.Errorf("kinds found %v: the walk missed files", kinds)
	}
}

func firstDoc(data []byte) []byte {
	s := string(data)
	for _, sep := range []string{"\n---\n", "\n---\r\n"} {
		if i := strings.Index(s, sep); i >= 0 {
			s = s[:i]
		}
	}
	return []byte(s)
}

var envoyImage = regexp.MustCompile(`envoyproxy/envoy:v(\d+)\.(\d+)\.\d+`)

// checkCompose: every bind-mounted file exists, the Envoy image is >= 1.36.
func checkCompose(t *testing.T, path string, data []byte) {
	t.Helper()
	var doc struct {
		Services map[string]struct {
			Image   string   `json:"image"`
			Volumes []string `json:"volumes"`
		} `json:"services"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	envoys := 0
	for name, svc := range doc.Services {
		for _, v := range svc.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, ".") {
				if _, err := os.Stat(filepath.Join(filepath.Dir(path), src)); err != nil {
					t.Errorf("service %s mounts %s: %v", name, src, err)
				}
			}
		}
		if m := envoyImage.FindStringSubmatch(svc.Image); m != nil {
			envoys++
			if m[1] != "1" || len(m[2]) < 2 || m[2] < "36" {
				t.Errorf("service %s runs %s: ILB needs Envoy >= 1.36", name, svc.Image)
			}
		}
	}
	if envoys == 0 {
		t.Error("no envoyproxy/envoy:vX.Y.Z service")
	}
}

func TestValidateEnvoyCommand(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name  string
		args  []string
		code  int
		wants []string
	}{
		{"unknown field", []string{"--envoy", write("a.yaml", "node: {id: a, colour: red}")}, 1, []string{`unknown field "colour"`}},
		{"semantic error", []string{"--envoy", write("b.yaml", `routes:
- name: r
  virtual_hosts:
  - name: v
    domains: ["*"]
    routes:
    - match: {prefix: /}
      route: {cluster: c, retry_policy: {retry_on: "5xx,retriable-status-code"}}
clusters:
- {name: c, connect_timeout: 1s}`)}, 1, []string{
			`error: route configuration "r" virtual host "v" route "#0": timeout unset`,
			`retry_on: unknown condition "retriable-status-code"`,
		}},
		{"two bootstraps", []string{"--envoy", "../../envoy/front-gateway.yaml", "--envoy", "../../envoy/sidecar.yaml"}, 1, []string{"a second bootstrap"}},
		{"ok with warning", []string{"--envoy", "../../xds/testdata/edge-us.yaml"}, 0, []string{"warning:", `ok: 4 clusters`, "(1 warnings)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runCmd(t, append([]string{"validate"}, tc.args...)...)
			if got := exitCode(err); got != tc.code {
				t.Errorf("exit %d (%v), want %d:\n%s", got, err, tc.code, out)
			}
			for _, w := range tc.wants {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
	if _, _, err := runCmd(t, "validate", "--config", "x", "--envoy", "y"); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("both flags: %v", err)
	}
}
