package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/istio"
	"github.com/ilbproject/ilb/weights"
)

// runRender renders ILB's routing for a mesh that owns the proxies'
// routes: `ilb render istio ...` (see docs/istio.md).
func runRender(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprintln(stderr, "Usage: ilb render istio --config FILE --hosts HOST[,HOST] [flags]: ILB's routing as Istio resources (ilb render istio -h for the flags)")
		return exitError{0}
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return errors.New("render: name the target: ilb render istio --config FILE --hosts HOST[,HOST] ... (-h for the flags)")
	}
	if args[0] != "istio" {
		return fmt.Errorf("render: unknown target %q: want istio", args[0])
	}
	return renderIstio(args[1:], stdout, stderr)
}

func renderIstio(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("render istio", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "ILB configuration file (YAML)")
	weightsPath := fs.String("weights", "", "render these weights (JSON, as ilb solve --json and /debug/weights write them)")
	demandPath := fs.String("demand", "", "compute the weights from this demand file (YAML) with the configured policy (default: the static weights, every endpoint ready)")
	sources := fs.String("source", "", "comma-separated sources to render (default: every source with routing: cluster)")
	hosts := fs.String("hosts", "", "comma-separated hosts clients call the inference service by: the VirtualService's hosts (required)")
	gateways := fs.String("gateway", "", "comma-separated Istio Gateways (namespace/name) the VirtualService binds, or mesh (default: mesh, client sidecars)")
	namespace := fs.String("namespace", istio.DefaultNamespace, "namespace of the VirtualServices (DestinationRules go to their service's namespace)")
	proxyNamespace := fs.String("proxy-namespace", istio.DefaultProxyNamespace, "namespace of the EnvoyFilters (the mesh's root namespace applies them in every namespace)")
	extProc := fs.String("extproc-cluster", "", "the proxies' Envoy cluster of ILB's ext_proc service (default outbound|<listen.extproc port>||"+istio.DefaultExtProcHost+")")
	selector := fs.String("workload-selector", "", "k=v[,k=v...]: labels of the proxies that run ext_proc (default "+istio.SourceLabel+"=<source>)")
	port := fs.Uint("listener-port", 0, "limit the EnvoyFilter to the proxies' listener on this port: the gateway's container port, or the service port for sidecars (default: every listener)")
	out := fs.String("out", "", "write the manifests to this file, atomically (default: standard output)")
	ilbSAN := fs.String("ilb-san", "", "mutual TLS to ILB's ext_proc with the proxies' Istio workload certificates (SDS default and ROOTCA from sds-grpc): ILB's identity in its certificate, e.g. spiffe://cluster.local/ns/ilb-system/sa/ilb (needs security.tls)")
	extprocAddr := fs.String("extproc-address", "", "with --ilb-san: ILB's ext_proc service as the proxies reach it, host:port (default "+istio.DefaultExtProcHost+":<listen.extproc port>)")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	switch {
	case *cfgPath == "":
		return errors.New("render istio: --config is required")
	case *weightsPath != "" && *demandPath != "":
		return errors.New("render istio: give --weights or --demand, not both")
	case fs.NArg() > 0:
		return fmt.Errorf("render istio: unexpected argument %q", fs.Arg(0))
	case *port > 65535:
		return fmt.Errorf("render istio: --listener-port %d: want 1..65535", *port)
	case *extprocAddr != "" && *ilbSAN == "":
		return errors.New("render istio: --extproc-address is the address of ILB's TLS cluster: give --ilb-san too")
	}
	o := istio.Options{
		Namespace: *namespace, ProxyNamespace: *proxyNamespace, ExtProcCluster: *extProc, Sources: list(*sources),
		Placement: istio.Placement{Hosts: list(*hosts), Gateways: list(*gateways), ListenerPort: uint32(*port)},
	}
	if *ilbSAN != "" {
		o.TLS = &istio.TLS{ILBSAN: *ilbSAN, Address: *extprocAddr}
	}
	if *selector != "" {
		sel, err := istio.ParseSelector(*selector)
		if err != nil {
			return fmt.Errorf("render istio: --workload-selector: %w", err)
		}
		o.WorkloadSelector = sel
	}
	c, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	w, err := renderWeights(c, *weightsPath, *demandPath)
	if err != nil {
		return fmt.Errorf("render istio: %w", err)
	}
	y, err := istio.Render(c, w, o)
	if err != nil {
		return fmt.Errorf("render istio: %w", err)
	}
	if *out == "" {
		_, err = stdout.Write(y)
		return err
	}
	if err := writeAtomic(*out, y); err != nil {
		return fmt.Errorf("render istio: %w", err)
	}
	fmt.Fprintf(stderr, "wrote %s: weights %s (policy %s)\n", *out, w.Version(), w.Policy())
	return nil
}

// renderWeights reads the weights file, or computes the weights from the
// demand file with the configured policy, or the static weights.
func renderWeights(c *config.Config, weightsPath, demandPath string) (*weights.Weights, error) {
	switch {
	case weightsPath != "":
		b, err := os.ReadFile(weightsPath)
		if err != nil {
			return nil, err
		}
		var w weights.Weights
		if err := json.Unmarshal(b, &w); err != nil {
			return nil, fmt.Errorf("weights %s: %w", weightsPath, err)
		}
		return &w, nil
	case demandPath != "":
		data, err := os.ReadFile(demandPath)
		if err != nil {
			return nil, err
		}
		d, states, err := controller.ParseDemandFile(c, data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", demandPath, err)
		}
		p, err := weights.NewPolicy(c.Controller.Policy)
		if err != nil {
			return nil, err
		}
		return p.Compute(weights.Input{Config: c, Clusters: states, Demand: d, Now: time.Now()})
	}
	return weights.ComputeStatic(c)
}

// list splits a comma-separated flag value, dropping empty items.
func list(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// writeAtomic replaces path with data through a temporary file in the
// same directory, so a reader (a GitOps agent) never sees half a file.
func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
