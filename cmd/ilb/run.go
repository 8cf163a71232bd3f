package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
)

// exitError ends the process with code after the command printed what it
// had to say.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// command is one subcommand of ilb.
type command struct {
	name, args, summary string
	run                 func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return append([]command{
		{"serve", "--config FILE", "run ILB: xDS (:18000), ext_proc (:18001) and admin (:18002) in one process", runServe},
		{"validate", "--config FILE | --envoy FILE...", "check an ILB configuration, or Envoy bootstrap/resource files offline: one problem per line, exit 1 on errors", runValidate},
		{"envoy-config", "--config FILE --source S", "print the Envoy bootstrap for the Envoys of source S", runEnvoyConfig},
		{"explain", "[--admin ADDR] [--trace-url T] REQUEST_ID", "explain how one request was routed", runExplain},
		{"weights", "[--admin ADDR] [--source S] [--model M] [--explain]", "print the weights in force, and why", runWeights},
		{"why", "--source S --model M [--versions N] [--admin ADDR]", "explain one cell's weights and what changed in the last versions", runWhy},
		{"solve", "--config FILE --demand FILE [--previous W.json]", "compute one controller tick offline from a demand file", runSolve},
		{"render", "istio --config FILE --hosts H [flags]", "render Istio VirtualService, DestinationRules, EnvoyFilter for routing: cluster sources", runRender},
		{"rollout", "status [--admin ADDR] [--source S]", "print each source's xDS rollout: stable, canary, rejected versions", runRollout},
		{"signals", "[--admin ADDR] [--cluster C]", "print the engines' replica and cluster state, and measured demand", runSignals},
		{"certs", "--dir DIR --sources S,... [--hosts H,...] [--force]", "make a development CA, certificates for ILB, each source's Envoys and the admin CLI, and an admin token", runCerts},
	}, labCommands()...)
}

// run is the whole program behind main: it parses args and runs one
// command until it returns or ctx is done.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		return nil
	}
	for _, c := range commands() {
		if c.name == args[0] {
			return c.run(ctx, args[1:], stdout, stderr)
		}
	}
	return unknownCommand(args[0], stderr)
}

// unknownCommand is the error of a command this binary lacks: for a
// command of the full build, the one line that says where it is (no
// usage to scroll past); else the usage, on stderr, and the name.
func unknownCommand(name string, stderr io.Writer) error {
	if slices.Contains(labCommandNames, name) {
		return fmt.Errorf("%q is not in this binary, built with -tags serving: use bin/ilb-lab %s (make build) or go run ./cmd/ilb %s", name, name, name)
	}
	usage(stderr)
	return fmt.Errorf("unknown command %q", name)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "ilb — the Inference Load Balancer\n\nUsage: ilb COMMAND [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-13s %-52s %s\n", c.name, c.args, c.summary)
	}
	fmt.Fprintln(w, "\nexplain, weights, why, rollout and signals read the admin API: --admin [https://]HOST:PORT,")
	fmt.Fprintln(w, "--admin-ca FILE, --admin-cert FILE --admin-key FILE, --admin-token-file FILE ($ILB_ADMIN, $ILB_ADMIN_*).")
	fmt.Fprintln(w, "\nRun ilb COMMAND -h for the flags of a command.")
}

// parse parses flags into fs, which reports to stderr. -h is not an error.
// isHelp reports whether arg asks for help instead of a subcommand.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

func parse(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitError{0}
		}
		return exitError{2}
	}
	return nil
}

// newLogger writes text logs at level ("debug", "info", "warn", "error").
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// labCommandNames are the commands only the full build has (lab.go).
var labCommandNames = []string{"demo", "sim", "engine", "engines", "ha-demo", "bench-xds", "bench-replicas", "envoysim"}
