package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/envoy"
	"github.com/ilbproject/ilb/weights"
	"github.com/ilbproject/ilb/xds"
)

// runEnvoyConfig prints the bootstrap of a source's Envoys, or with
// --resources what the xDS server serves them now (static capacity).
func runEnvoyConfig(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("envoy-config", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "ILB configuration file (YAML)")
	source := fs.String("source", "", "source (Envoy node.cluster) to render for")
	nodeID := fs.String("node-id", "", "Envoy node.id (default SOURCE-envoy)")
	xdsAddr := fs.String("xds", "", "ILB xDS address as Envoy reaches it (default listen.xds); several replicas (ha:) comma-separated")
	extprocAddr := fs.String("extproc", "", "ILB ext_proc address as Envoy reaches it (default listen.extproc); several replicas (ha:) comma-separated")
	adminAddr := fs.String("admin", "auto", "Envoy admin address; empty for none; auto: 127.0.0.1, port 9901 + the source's index in the configuration (one Envoy per source on one host)")
	resources := fs.Bool("resources", false, "print the xDS resources (CDS, EDS, RDS, LDS) instead of the bootstrap")
	sidecar := fs.String("sidecar", "", "render a sidecar bootstrap: ILB's listener static on this host:port, LDS off")
	var t envoy.UpstreamTLS
	fs.StringVar(&t.CertFile, "tls-cert", "", "TLS to ILB: the Envoy's client certificate chain (PEM file, as Envoy sees the path)")
	fs.StringVar(&t.KeyFile, "tls-key", "", "TLS to ILB: the Envoy's private key (PEM file)")
	fs.StringVar(&t.CAFile, "tls-ca", "", "TLS to ILB: the CA bundle that signed ILB's certificate (PEM file)")
	fs.StringVar(&t.SDSCert, "tls-sds-cert", "", "TLS to ILB with SDS: the secret of the Envoy's certificate (SPIRE: its SPIFFE ID; Istio's agent: default)")
	fs.StringVar(&t.SDSCA, "tls-sds-ca", "", "TLS to ILB with SDS: the secret of the trusted CAs (SPIRE: spiffe://<trust domain>; Istio's agent: ROOTCA)")
	fs.StringVar(&t.SDSCluster, "sds-cluster", envoy.DefaultSDSCluster, "TLS to ILB with SDS: the static cluster of the SDS server")
	fs.StringVar(&t.SDSAddress, "sds-address", "", "TLS to ILB with SDS: the SDS server, unix:/path/to/socket or host:port (the bootstrap then defines --sds-cluster)")
	fs.StringVar(&t.ILBSAN, "ilb-san", "", "TLS to ILB: ILB's identity in its certificate, a SPIFFE ID (spiffe://example.org/ilb) or a DNS name")
	fs.StringVar(&t.SNI, "tls-sni", "", "TLS to ILB: the server name Envoy sends (default the host of --xds/--extproc when it is a DNS name)")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if *cfgPath == "" || *source == "" {
		return errors.New("envoy-config: --config and --source are required")
	}
	c, err := config.Load(*cfgPath)
	if err != nil {
		return err
	}
	if *adminAddr == "auto" {
		i := slices.IndexFunc(c.Sources, func(s config.Source) bool { return s.Name == *source })
		*adminAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(9901+max(i, 0)))
	}
	var out []byte
	if *resources {
		w, err := weights.ComputeStatic(c)
		if err != nil {
			return err
		}
		res, err := xds.Build(c, w, nil, *source)
		if err != nil {
			return err
		}
		if _, err := res.Snapshot(); err != nil {
			return err
		}
		if out, err = res.YAML(); err != nil {
			return err
		}
	} else {
		o := envoy.BootstrapOptions{NodeID: *nodeID, XDS: *xdsAddr, ExtProc: *extprocAddr, Admin: *adminAddr}
		if tlsSet(fs) {
			o.TLS = &t
		}
		if err := envoy.RequireTLS(c, o); err != nil {
			return fmt.Errorf("envoy-config: %w", err)
		}
		if *sidecar != "" {
			if o.Listener, err = sidecarListener(c, *source, *sidecar); err != nil {
				return fmt.Errorf("envoy-config: --sidecar: %w", err)
			}
		}
		b, err := envoy.Bootstrap(c, *source, o)
		if err != nil {
			return fmt.Errorf("envoy-config: %w", err)
		}
		if out, err = envoy.MarshalYAML(b); err != nil {
			return err
		}
	}
	_, err = stdout.Write(out)
	return err
}

// tlsSet reports whether any flag of TLS to ILB was given (--sds-cluster
// alone, having a default, does not count).
func tlsSet(fs *flag.FlagSet) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "tls-cert", "tls-key", "tls-ca", "tls-sds-cert", "tls-sds-ca", "sds-address", "ilb-san", "tls-sni":
			set = true
		}
	})
	return set
}

// sidecarListener is the listener ILB serves source over LDS, bound to
// addr instead: a sidecar keeps it static and takes the rest from ILB.
func sidecarListener(c *config.Config, source, addr string) (*listenerv3.Listener, error) {
	w, err := weights.ComputeStatic(c)
	if err != nil {
		return nil, err
	}
	res, err := xds.Build(c, w, nil, source)
	if err != nil {
		return nil, err
	}
	return res.ListenerAt(addr)
}
