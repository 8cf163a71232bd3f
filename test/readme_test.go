package test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeBlock is the marker of the README's separate-processes block.
const readmeBlock = "<!-- readme-test: separate processes -->"

// TestREADMESeparateProcesses runs the README's lines that start the
// stack as separate processes, as written, from a directory holding the
// repository's examples: the binaries `make build` makes (built here
// into that directory), the engines, ILB and an Envoy model each in its
// own process on the demo world's fixed ports, then a request, its
// explanation and the rollout. A line ending in & runs in the
// background until the test ends; <…> is the x-request-id of the last
// response. It needs curl (the README's client).
func TestREADMESeparateProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries and runs the stack: not in -short")
	}
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Skipf("curl is missing (apt-get install curl): %v", err)
	}
	lines := readmeLines(t)
	dir := t.TempDir()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "examples"), filepath.Join(dir, "examples")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var bg []*exec.Cmd
	t.Cleanup(func() {
		for _, c := range bg {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGTERM)
			_ = c.Wait()
		}
	})
	env := append(os.Environ(), "PATH="+filepath.Dir(curl)+string(os.PathListSeparator)+os.Getenv("PATH"))
	var last string // the last foreground command's output
	id := regexp.MustCompile(`(?im)^x-request-id: (\S+)`)
	for _, line := range lines {
		if strings.HasPrefix(line, "make build") {
			// What make build does, into dir/bin (the repository's bin/
			// stays untouched).
			build(ctx, t, root, filepath.Join(dir, "bin", "ilb"), "-tags", "serving")
			build(ctx, t, root, filepath.Join(dir, "bin", "ilb-lab"))
			continue
		}
		if strings.Contains(line, "<") {
			m := id.FindStringSubmatch(last)
			if m == nil {
				t.Fatalf("%s: no x-request-id in the last output:\n%s", line, last)
			}
			line = regexp.MustCompile(`<[^>]*>`).ReplaceAllString(line, m[1])
		}
		cmdline, _, _ := strings.Cut(line, " #") // the README's comments
		cmdline = strings.TrimSpace(cmdline)
		background := strings.HasSuffix(cmdline, "&")
		c := exec.CommandContext(ctx, "sh", "-c", strings.TrimSuffix(cmdline, "&"))
		c.Dir, c.Env = dir, env
		if background {
			var out bytes.Buffer
			c.Stdout, c.Stderr = &out, &out
			c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			if err := c.Start(); err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			bg = append(bg, c)
			continue
		}
		out, err := c.CombinedOutput()
		last = string(out)
		if err != nil {
			t.Fatalf("%s: %v\n%s", line, err, out)
		}
		t.Logf("%s\n%s", cmdline, out)
	}
	// The lines did what the README says they do.
	if !strings.Contains(last, "source edge-us") {
		t.Errorf("rollout status: %s", last)
	}
	// Then the official SDKs, as their users call them, on that stack.
	t.Run("Go SDK", func(t *testing.T) { checkGoSDK(t, "http://127.0.0.1:10000/v1") })
	t.Run("Node SDK", func(t *testing.T) { checkNodeSDK(t, "http://127.0.0.1:10000/v1") })
}

// readmeLines are the command lines of the README's marked block.
func readmeLines(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), readmeBlock+"\n```sh\n")
	if !ok {
		t.Fatalf("README.md has no block after %q", readmeBlock)
	}
	block, _, _ := strings.Cut(rest, "```")
	var lines []string
	for l := range strings.SplitSeq(block, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// build builds ./cmd/ilb of the repository at root into out.
func build(ctx context.Context, t *testing.T, root, out string, flags ...string) {
	t.Helper()
	c := exec.CommandContext(ctx, "go", append(append([]string{"build"}, flags...), "-o", out, "./cmd/ilb")...)
	c.Dir = root
	if b, err := c.CombinedOutput(); err != nil {
		t.Fatalf("go build %v: %v\n%s", flags, err, b)
	}
}
