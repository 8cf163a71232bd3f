package admin_test

import (
	"context"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/extproc/extproctest"
	"github.com/ilbproject/ilb/weights"
)

// harness is a real ext_proc server on loopback, fed by a gRPC client
// that plays Envoy's side, so its decision log fills as in production.
type harness struct {
	srv    *extproc.Server
	client extprocv3.ExternalProcessorClient
	w      *weights.Weights
}

func startExtProc(t *testing.T) *harness {
	t.Helper()
	c, err := config.Load("../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := extproc.New(extproc.Options{
		Config: c, Registry: prometheus.NewRegistry(),
		Rand: func() uint64 { return 4242 },
	})
	if err != nil {
		t.Fatal(err)
	}
	w, err := weights.Proportional{}.Compute(weights.Input{Config: c, Clusters: weights.StaticState(c), Now: time.Unix(1700000000, 0)})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Publish(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	return &harness{srv: srv, client: extproctest.Serve(t, srv), w: w}
}

// request plays one request through ext_proc as Envoy would: headers,
// body, then (unless ILB answered itself) response headers naming served.
func (h *harness) request(t *testing.T, source, id, body, served string) {
	t.Helper()
	extproctest.Play(t, h.client, extproctest.Exchange{Source: source, RequestID: id, Body: body, Served: served, Version: h.w.Version()})
}

// chat is a chat request body for model.
func chat(model string) string { return extproctest.Chat(model) }
