// Package istiotest runs a real istiod for tests: pilot-discovery built
// from the Go module proxy (`make istio`, into .tools/istio, with Istio's
// CRDs beside it), out of cluster against a kubetest API server
// (--kubeconfig), every port on 127.0.0.1. Its plaintext xDS port serves
// any proxy that connects (package istiotest's ADS client plays a gateway
// or a sidecar).
//
// The binary is $ILB_ISTIOD (its CRDs $ILB_ISTIO_CRDS), else
// .tools/istio/pilot-discovery at the module's root. Without it the test
// is skipped, or fails when ILB_REQUIRE_ISTIO=1 (.ci/run builds it and
// sets that).
package istiotest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ilbproject/ilb/internal/kubetest"
)

// StartTimeout bounds the wait for istiod to answer ready.
const StartTimeout = 120 * time.Second

// Istiod is a running istiod.
type Istiod struct {
	t                  testing.TB
	dir, kubeconfig    string
	xdsAddr, readyAddr string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Binary returns istiod's binary and Istio's CRDs, or an error that says
// how to build them.
func Binary() (bin, crds string, err error) {
	bin, crds = os.Getenv("ILB_ISTIOD"), os.Getenv("ILB_ISTIO_CRDS")
	if bin == "" {
		if root, err := kubetest.ModuleRoot(); err == nil {
			bin = filepath.Join(root, ".tools", "istio", "pilot-discovery")
			if crds == "" {
				crds = filepath.Join(root, ".tools", "istio", "crd-all.gen.yaml")
			}
		}
	}
	for _, p := range []string{bin, crds} {
		if _, err := os.Stat(p); p == "" || err != nil {
			return "", "", errors.New("istiod is not built: the Istio tests run a real istiod; " +
				"run `make istio` (it builds pilot-discovery from the Go module proxy into .tools/istio, about 8 minutes), or set ILB_ISTIOD and ILB_ISTIO_CRDS")
		}
	}
	return bin, crds, nil
}

// Options adjust istiod.
type Options struct {
	// Env adds to istiod's environment (feature flags such as
	// ENABLE_GATEWAY_API_INFERENCE_EXTENSION=true).
	Env []string
	// Mesh is the mesh configuration (MeshConfig YAML, e.g. a
	// localityLbSetting); empty: Istio's defaults.
	Mesh string
	// GatewayAPI installs the Gateway API and Inference Extension CRDs
	// (of the versions istiod builds with) and turns on istiod's
	// InferencePool support (ENABLE_GATEWAY_API_INFERENCE_EXTENSION) with
	// its gateway deployment controller and status.
	GatewayAPI bool
}

// Start installs Istio's CRDs and the istio-system namespace in k, runs
// istiod against it and returns once istiod answers ready; it stops when
// the test ends. It skips the test without the binary (fails it with
// ILB_REQUIRE_ISTIO=1).
func Start(t testing.TB, k *kubetest.Server, o Options) *Istiod {
	t.Helper()
	bin, crds, err := Binary()
	if err != nil {
		if os.Getenv("ILB_REQUIRE_ISTIO") != "1" {
			t.Skipf("%v (ILB_REQUIRE_ISTIO=1 makes this a failure; .ci/run sets it)", err)
		}
		t.Fatal(err)
	}
	manifests, err := os.ReadFile(crds)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if _, err := k.Apply(ctx, manifests); err != nil {
		t.Fatalf("istiotest: Istio's CRDs: %v", err)
	}
	if o.GatewayAPI {
		gw, err := os.ReadFile(filepath.Join(filepath.Dir(crds), "gateway-api-crds.yaml"))
		if err != nil {
			t.Fatalf("istiotest: the Gateway API CRDs (make istio writes them beside Istio's): %v", err)
		}
		if _, err := k.Apply(ctx, gw); err != nil {
			t.Fatalf("istiotest: Gateway API CRDs: %v", err)
		}
		// The deployment controller is the one that makes an
		// InferencePool's shadow Service (without it the pool's route
		// names an UnknownService); it also writes route status. It makes
		// Deployments nobody runs here: no kubelet.
		o.Env = append(o.Env, "ENABLE_GATEWAY_API_INFERENCE_EXTENSION=true",
			"PILOT_ENABLE_GATEWAY_API_DEPLOYMENT_CONTROLLER=true", "PILOT_ENABLE_GATEWAY_API_STATUS=true")
	}
	k.Namespace(t, "istio-system")
	i := &Istiod{t: t, dir: t.TempDir(), kubeconfig: k.Kubeconfig("istiod", "")}
	t.Cleanup(i.stop)
	// Its five ports are picked free, then bound by istiod seconds later:
	// on a busy machine another process may take one in between (it did,
	// under make test beside six busy loops). Like kubetest's API server,
	// it starts again on new ports then.
	for attempt := 1; ; attempt++ {
		err := i.launch(o, bin)
		if err == nil {
			return i
		}
		lost := strings.Contains(i.Tail(), "address already in use")
		i.stop()
		if !lost || attempt == 3 {
			t.Fatalf("istiotest: %v\n%s", err, i.Tail())
		}
	}
}

// launch runs istiod on new free ports and waits until it answers ready.
func (i *Istiod) launch(o Options, bin string) error {
	ports := make([]int, 5)
	for n := range ports {
		var err error
		if ports[n], err = kubetest.FreePort(); err != nil {
			return err
		}
	}
	addr := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	i.xdsAddr, i.readyAddr = addr(ports[0]), addr(ports[1])
	args := []string{
		"discovery", "--kubeconfig", i.kubeconfig,
		"--grpcAddr", i.xdsAddr, "--httpAddr", i.readyAddr, "--secureGRPCAddr", addr(ports[2]),
		"--monitoringAddr", addr(ports[3]), "--httpsAddr", addr(ports[4]),
		"--domain", "cluster.local", "--log_output_level", "default:info",
	}
	if o.Mesh != "" {
		mesh := filepath.Join(i.dir, "mesh.yaml")
		if err := os.WriteFile(mesh, []byte(o.Mesh), 0o600); err != nil {
			return err
		}
		args = append(args, "--meshConfig", mesh)
	}
	cmd := exec.Command(bin, args...) //nolint:noctx // the process outlives this call: the cleanup stops it
	cmd.Env = append(os.Environ(),
		"POD_NAMESPACE=istio-system", "POD_NAME=istiod-test", "REVISION=default", "CLUSTER_ID=Kubernetes",
		"PILOT_ENABLE_GATEWAY_API=true", "PILOT_ENABLE_GATEWAY_API_STATUS=false",
		"PILOT_ENABLE_GATEWAY_API_DEPLOYMENT_CONTROLLER=false", "PILOT_ENABLE_GATEWAY_API_GATEWAYCLASS_CONTROLLER=false",
		"INJECTION_WEBHOOK_CONFIG_NAME=", "VALIDATION_WEBHOOK_CONFIG_NAME=", "ISTIOD_CUSTOM_HOST=istiod.istio-system.svc",
		"PILOT_ENABLE_ANALYSIS=false", "ENABLE_CA_SERVER=false",
	)
	cmd.Env = append(cmd.Env, o.Env...)
	logf, err := os.Create(filepath.Join(i.dir, "istiod.log")) // a new log per attempt
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", bin, err)
	}
	done := make(chan struct{})
	i.mu.Lock()
	i.cmd, i.done = cmd, done
	i.mu.Unlock()
	go func() { _ = cmd.Wait(); close(done) }()
	return i.waitReady()
}

// waitReady polls /ready until it answers 200.
func (i *Istiod) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	url := "http://" + i.readyAddr + "/ready"
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-i.done:
			return errors.New("istiod exited")
		case <-ctx.Done():
			return fmt.Errorf("istiod not ready within %s", StartTimeout)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// XDSAddr is istiod's plaintext xDS address, 127.0.0.1:port.
func (i *Istiod) XDSAddr() string { return i.xdsAddr }

func (i *Istiod) stop() {
	i.mu.Lock()
	cmd := i.cmd
	i.cmd = nil
	i.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-i.done
	if i.t.Failed() {
		i.t.Logf("--- istiod log tail:\n%s", i.Tail())
	}
}

// Tail is the end of istiod's log, for a failure message.
func (i *Istiod) Tail() string {
	b, _ := os.ReadFile(filepath.Join(i.dir, "istiod.log"))
	if len(b) > 8000 {
		b = append([]byte("…"), b[len(b)-8000:]...)
	}
	return string(b)
}
