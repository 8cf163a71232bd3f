package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/envoy"
	"github.com/ilbproject/ilb/kube"
	"github.com/ilbproject/ilb/weights"
	"github.com/ilbproject/ilb/xds"
)

// files is a repeatable string flag.
type files []string

func (f *files) String() string     { return strings.Join(*f, ",") }
func (f *files) Set(v string) error { *f = append(*f, v); return nil }

// runValidate prints one problem per line and exits 1, or a one-line
// summary.
func runValidate(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "ILB configuration file (YAML)")
	var envoyFiles files
	fs.Var(&envoyFiles, "envoy", "an Envoy bootstrap or resource file (YAML); repeat to check a bootstrap with the resources it is served")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	envoyFiles = append(envoyFiles, fs.Args()...)
	switch {
	case *cfgPath == "" && len(envoyFiles) == 0:
		return errors.New("validate: --config or --envoy is required")
	case *cfgPath != "" && len(envoyFiles) > 0:
		return errors.New("validate: give --config or --envoy, not both")
	case len(envoyFiles) > 0:
		return validateEnvoy(stdout, envoyFiles)
	}
	data, err := os.ReadFile(*cfgPath)
	if err != nil {
		return fmt.Errorf("validate: %w", err)
	}
	c, err := config.Parse(data)
	if err == nil {
		err = servable(c)
	}
	if err != nil {
		for _, p := range problems(err) {
			fmt.Fprintf(stdout, "%s: %s\n", *cfgPath, p)
		}
		return exitError{1}
	}
	endpoints := 0
	for _, e := range c.Clusters {
		endpoints += len(e.Endpoints)
	}
	fmt.Fprintf(stdout, "%s: ok: %d regions, %d sources, %d models, %d engine clusters (%d endpoints), policy %s\n",
		*cfgPath, len(c.Regions), len(c.Sources), len(c.Models), len(c.Clusters), endpoints, c.Controller.Policy)
	return nil
}

// validateEnvoy checks Envoy files as one bundle: strict decoding,
// ValidateAll into every Any, then ILB's semantic checks. Warnings are
// printed; errors make the exit status 1.
func validateEnvoy(stdout io.Writer, paths []string) error {
	name := strings.Join(paths, " + ")
	b, err := envoy.LoadBundle(paths...)
	if err != nil {
		for _, p := range problems(err) {
			fmt.Fprintf(stdout, "%s\n", p)
		}
		return exitError{1}
	}
	ps := b.Check()
	warnings := 0
	for _, p := range ps {
		fmt.Fprintf(stdout, "%s: %s\n", name, p)
		if p.Warning {
			warnings++
		}
	}
	if envoy.Errors(ps) != nil {
		return exitError{1}
	}
	fmt.Fprintf(stdout, "%s: ok: %s (%d warnings)\n", name, b.Summary(), warnings)
	return nil
}

// servable builds what `ilb serve` would serve from c — the weights, every
// source's snapshot (ValidateAll, references, consistency) and bootstrap —
// so that "ok" means the server will start.
func servable(c *config.Config) error {
	w, err := weights.ComputeStatic(c)
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range c.Sources {
		res, err := xds.Build(c, w, nil, s.Name)
		if err == nil {
			_, err = res.Snapshot()
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("source %s: Envoy resources: %w", s.Name, err))
		}
		if _, err := envoy.Bootstrap(c, s.Name, envoy.BootstrapOptions{}); err != nil {
			errs = append(errs, fmt.Errorf("source %s: %w", s.Name, err))
		}
	}
	// The kubeconfig files of the API servers clusters and ha.kubernetes
	// use: serve reads them at start (the in-cluster configuration only
	// exists in a pod).
	used := map[string]bool{}
	if c.HA != nil && c.HA.Kubernetes != nil {
		if a, ok := c.KubeAPIServer(c.HA.Kubernetes.APIServer); ok {
			used[a.Name] = true
		}
	}
	for _, e := range c.Clusters {
		if k := e.Discovery.Kubernetes; e.Discovery.Type == config.DiscoveryKube && k != nil {
			if a, ok := c.KubeAPIServer(k.APIServer); ok {
				used[a.Name] = true
			}
		}
	}
	for i, a := range c.Kubernetes.APIServers {
		if used[a.Name] && a.Kubeconfig != "" {
			if _, err := kube.RESTConfig(a); err != nil {
				errs = append(errs, fmt.Errorf("kubernetes.api_servers[%d] (%s): %w", i, a.Name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// problems flattens joined errors into one message each.
func problems(err error) []string {
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		var out []string
		for _, e := range joined.Unwrap() {
			out = append(out, problems(e)...)
		}
		return out
	}
	return []string{err.Error()}
}
