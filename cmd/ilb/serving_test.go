package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestServingBinaryLinksNoSim: the serving binary (-tags serving, what
// `make build` builds) compiles (its files are not the ones this test
// binary is built from) and links no simulation code: neither envoysim,
// the engine model, the benchmark nor gonum/plot.
func TestServingBinaryLinksNoSim(t *testing.T) {
	if out, err := exec.Command("go", "vet", "-tags", "serving", ".").CombinedOutput(); err != nil {
		t.Fatalf("the serving build does not compile: %v\n%s", err, out)
	}
	out, err := exec.Command("go", "list", "-tags", "serving", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/ilbproject/ilb/sim/") || strings.HasPrefix(pkg, "gonum.org/") {
			t.Errorf("the serving binary links %s", pkg)
		}
	}
}

// TestLabCommandNames: the names the serving binary refers to the lab
// binary for are the lab commands.
func TestLabCommandNames(t *testing.T) {
	var names []string
	for _, c := range labCommands() {
		names = append(names, c.name)
	}
	if !slices.Equal(names, labCommandNames) {
		t.Errorf("lab commands %v, labCommandNames %v", names, labCommandNames)
	}
}

// TestUnknownCommand: a command of the full build, asked of the serving
// binary, gets one line saying where it is; an unknown one the usage.
func TestUnknownCommand(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		usage      bool
	}{
		{"engine", `"engine" is not in this binary, built with -tags serving: use bin/ilb-lab engine (make build)`, false},
		{"envoysim", "use bin/ilb-lab envoysim", false},
		{"nosuch", `unknown command "nosuch"`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr strings.Builder
			err := unknownCommand(tc.name, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v; want %q", err, tc.want)
			}
			if got := strings.Contains(stderr.String(), "Usage:"); got != tc.usage {
				t.Errorf("usage printed %v; want %v:\n%s", got, tc.usage, stderr.String())
			}
		})
	}
}
