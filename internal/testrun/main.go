// Command testrun runs `go test -json` with its arguments and prints what
// `go test` prints without -v — each package's result, and the whole
// output of a test that fails — then the tests that were skipped, by
// reason: a run that skipped the browser, etcd or Kubernetes tests says
// so at its end instead of passing silently. It exits with go test's
// status.
//
//	go run ./internal/testrun -race -count=1 ./...
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"syscall"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output events
}

// skip is a skipped test and why.
type skip struct{ pkg, test, reason string }

func main() { os.Exit(run(os.Args[1:])) }

// run runs go test -json with args and returns the exit status.
func run(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd := exec.CommandContext(ctx, "go", append([]string{"test", "-json"}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testrun:", err)
		return 2
	}
	skips := relay(out, os.Stdout)
	werr := cmd.Wait()
	summarize(os.Stdout, skips)
	var ee *exec.ExitError
	switch {
	case errors.As(werr, &ee):
		return ee.ExitCode()
	case werr != nil:
		fmt.Fprintln(os.Stderr, "testrun:", werr)
		return 2
	}
	return 0
}

// relay prints r's events as go test without -v would and returns the
// skipped tests.
func relay(r io.Reader, w io.Writer) []skip {
	var skips []skip
	held := map[[2]string][]string{} // (package, test) → its output so far
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Fprintln(w, sc.Text()) // not an event: as it came
			continue
		}
		key := [2]string{e.Package, e.Test}
		switch {
		case e.Action == "build-output":
			fmt.Fprint(w, e.Output)
		case e.Test == "" && e.Action == "output":
			if t := strings.TrimSpace(e.Output); t != "PASS" && !strings.HasPrefix(t, "=== ") {
				fmt.Fprint(w, e.Output)
			}
		case e.Test == "":
		case e.Action == "output":
			if !strings.HasPrefix(e.Output, "=== ") { // the runner's RUN, PAUSE, CONT
				held[key] = append(held[key], e.Output)
			}
		case e.Action == "fail":
			fmt.Fprint(w, strings.Join(held[key], ""))
			delete(held, key)
		case e.Action == "skip":
			skips = append(skips, skip{e.Package, e.Test, reason(held[key])})
			delete(held, key)
		case e.Action == "pass":
			delete(held, key)
		}
	}
	return skips
}

// reason is why a test skipped: its last line of output that is not the
// runner's own, without the file:line prefix.
func reason(lines []string) string {
	for _, l := range slices.Backward(lines) {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") {
			continue
		}
		if _, msg, ok := strings.Cut(t, ": "); ok && strings.Contains(t[:len(t)-len(msg)], "_test.go:") {
			return msg
		}
		return t
	}
	return "(no reason given)"
}

// summarize prints the skipped tests grouped by reason, most first.
func summarize(w io.Writer, skips []skip) {
	if len(skips) == 0 {
		fmt.Fprintln(w, "no test skipped")
		return
	}
	by := map[string][]string{}
	var reasons []string
	for _, s := range skips {
		if _, ok := by[s.reason]; !ok {
			reasons = append(reasons, s.reason)
		}
		by[s.reason] = append(by[s.reason], strings.TrimPrefix(s.pkg, "github.com/ilbproject/ilb/")+"."+s.test)
	}
	slices.SortStableFunc(reasons, func(a, b string) int { return len(by[b]) - len(by[a]) })
	fmt.Fprintf(w, "%d tests skipped:\n", len(skips))
	for _, r := range reasons {
		tests := by[r]
		list := strings.Join(tests[:min(len(tests), 4)], ", ")
		if len(tests) > 4 {
			list += fmt.Sprintf(", and %d more", len(tests)-4)
		}
		fmt.Fprintf(w, "  %d: %s\n     (%s)\n", len(tests), r, list)
	}
}
