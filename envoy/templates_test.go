package envoy_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/envoy"
	"github.com/ilbproject/ilb/weights"
	"github.com/ilbproject/ilb/xds"
)

// template is a rendered bootstrap kept in the repository.
type template struct {
	file, config, source, sidecar, header string
	opts                                  envoy.BootstrapOptions
}

// The bootstrap templates under envoy/ are what `ilb envoy-config`
// renders for the demo configuration with ILB reachable by its
// Kubernetes service name; -update rewrites them.
var templates = []template{
	{
		file: "front-gateway.yaml", config: "../examples/demo/ilb.yaml", source: "edge-us", opts: k8s,
		header: `# Envoy bootstrap for a front gateway of source edge-us.
#
# Rendered by:  ilb envoy-config --config examples/demo/ilb.yaml --source edge-us \
#                 --xds ilb.ilb-system.svc.cluster.local:18000 \
#                 --extproc ilb.ilb-system.svc.cluster.local:18001
# Everything but ILB's two clusters comes over one ADS stream: the listener
# (LDS), the engine clusters (CDS), their endpoints (EDS) and the weighted
# routes (RDS). node.cluster names the source: it keys the snapshot ILB
# serves. Checked offline by:  ilb validate --envoy envoy/front-gateway.yaml
`,
	},
	{
		file: "sidecar.yaml", config: "../examples/demo/ilb.yaml", source: "edge-eu", sidecar: "127.0.0.1:15001", opts: k8s,
		header: `# Envoy bootstrap for a sidecar of source edge-eu: the application sends its
# OpenAI requests to http://127.0.0.1:15001.
#
# Rendered by:  ilb envoy-config --config examples/demo/ilb.yaml --source edge-eu \
#                 --sidecar 127.0.0.1:15001 \
#                 --xds ilb.ilb-system.svc.cluster.local:18000 \
#                 --extproc ilb.ilb-system.svc.cluster.local:18001
# The listener is static (the pod owns its address and lifecycle; LDS is
# off) and is ILB's listener: early removal of client-sent x-ilb-route-*
# headers, the ext_proc filter with this source in its initial metadata,
# removal of internal response headers, and the router on RDS ilb_routes.
# Clusters, endpoints and routes come from ILB over ADS.
# Checked offline by:  ilb validate --envoy envoy/sidecar.yaml
`,
	},
	{
		file: "../examples/compose/envoy.yaml", config: "../examples/compose/ilb.yaml", source: "edge-us",
		opts: envoy.BootstrapOptions{NodeID: "envoy", XDS: "ilb:18000", ExtProc: "ilb:18001", Admin: "0.0.0.0:9901"},
		header: `# The Envoy of examples/compose (source edge-us).
#
# Rendered by:  ilb envoy-config --config examples/compose/ilb.yaml --source edge-us \
#                 --node-id envoy --xds ilb:18000 --extproc ilb:18001 --admin 0.0.0.0:9901
# Checked offline by:  ilb validate --envoy examples/compose/envoy.yaml
`,
	},
	secureTemplate("edge-us", "127.0.0.1:9901"),
	secureTemplate("edge-eu", "127.0.0.1:9902"),
}

// secureTemplate is the bootstrap of examples/secure for source: mutual
// TLS to ILB on loopback with the certificates `ilb certs` writes, its
// admin on admin (envoy-config's default: 9901 + the source's index, so
// that both Envoys run on one host).
func secureTemplate(source, admin string) template {
	dir := "examples/secure/certs/"
	return template{
		file: "../examples/secure/envoy-" + source + ".yaml", config: "../examples/secure/ilb.yaml", source: source,
		opts: envoy.BootstrapOptions{XDS: "127.0.0.1:18000", ExtProc: "127.0.0.1:18001", Admin: admin, TLS: &envoy.UpstreamTLS{
			CertFile: dir + "envoy-" + source + ".pem", KeyFile: dir + "envoy-" + source + "-key.pem", CAFile: dir + "ca.pem",
			ILBSAN: "spiffe://ilb.local/ilb",
		}},
		header: `# The Envoy of source ` + source + ` in examples/secure: mutual TLS to ILB.
#
# Rendered by:  ilb envoy-config --config examples/secure/ilb.yaml --source ` + source + ` \
#                 --xds 127.0.0.1:18000 --extproc 127.0.0.1:18001 \
#                 --tls-cert ` + dir + `envoy-` + source + `.pem \
#                 --tls-key ` + dir + `envoy-` + source + `-key.pem \
#                 --tls-ca ` + dir + `ca.pem --ilb-san spiffe://ilb.local/ilb
# Both clusters to ILB (ilb_xds: ADS and LRS; ilb_extproc) present the
# Envoy's certificate, trust only the example's CA, accept only a server
# certificate naming spiffe://ilb.local/ilb, and negotiate h2. Run from the
# repository root (the certificate paths are relative to it).
# Checked offline by:  ilb validate --envoy examples/secure/envoy-` + source + `.yaml
`,
	}
}

// k8s reaches ILB by its Kubernetes service name.
var k8s = envoy.BootstrapOptions{
	XDS: "ilb.ilb-system.svc.cluster.local:18000", ExtProc: "ilb.ilb-system.svc.cluster.local:18001", Admin: "127.0.0.1:9901",
}

func renderTemplate(t *testing.T, c *config.Config, source, sidecar, header string, o envoy.BootstrapOptions) []byte {
	t.Helper()
	if sidecar != "" {
		w, err := weights.ComputeStatic(c)
		if err != nil {
			t.Fatal(err)
		}
		res, err := xds.Build(c, w, nil, source)
		if err != nil {
			t.Fatal(err)
		}
		if o.Listener, err = res.ListenerAt(sidecar); err != nil {
			t.Fatal(err)
		}
	}
	b, err := envoy.Bootstrap(c, source, o)
	if err != nil {
		t.Fatal(err)
	}
	y, err := envoy.MarshalYAML(b)
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(header), y...)
}

func TestTemplates(t *testing.T) {
	for _, tpl := range templates {
		t.Run(tpl.file, func(t *testing.T) {
			c, err := config.Load(tpl.config)
			if err != nil {
				t.Fatal(err)
			}
			got := renderTemplate(t, c, tpl.source, tpl.sidecar, tpl.header, tpl.opts)
			if *update {
				if err := os.WriteFile(tpl.file, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(tpl.file)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s is not what ilb envoy-config renders (go test ./envoy -update):\n%s", tpl.file, got)
			}
			// Alone, and with the resources ILB serves that source.
			served := filepath.Join(t.TempDir(), "served.yaml")
			if err := os.WriteFile(served, servedYAML(t, c, tpl.source), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, files := range [][]string{{tpl.file}, {tpl.file, served}} {
				b, err := envoy.LoadBundle(files...)
				if err != nil {
					t.Fatal(err)
				}
				if ps := b.Check(); len(ps) > 0 {
					t.Errorf("%v: problems:\n%s", files, join(ps))
				}
			}
		})
	}
}

func servedYAML(t *testing.T, c *config.Config, source string) []byte {
	t.Helper()
	w, err := weights.ComputeStatic(c)
	if err != nil {
		t.Fatal(err)
	}
	res, err := xds.Build(c, w, nil, source)
	if err != nil {
		t.Fatal(err)
	}
	y, err := res.YAML()
	if err != nil {
		t.Fatal(err)
	}
	return y
}
