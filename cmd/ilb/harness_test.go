package main

import (
	"context"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/ilbproject/ilb/admin"
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/extproc/extproctest"
	"github.com/ilbproject/ilb/weights"
)

// liveStack is a real ext_proc server (traced, draw fixed at slot 4242) and
// the admin API over its decision log, both on loopback: what `ilb
// explain` talks to in production.
type liveStack struct {
	srv    *extproc.Server
	client extprocv3.ExternalProcessorClient
	w      *weights.Weights
	admin  string // host:port
}

func startStack(t *testing.T) *liveStack {
	t.Helper()
	c, err := config.Load("../../examples/demo/ilb.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider() // valid, sampled span ids; exports nowhere
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	srv, err := extproc.New(extproc.Options{
		Config: c, Registry: prometheus.NewRegistry(), TracerProvider: tp,
		Rand: func() uint64 { return 4242 },
	})
	if err != nil {
		t.Fatal(err)
	}
	w, err := weights.Proportional{}.Compute(weights.Input{Config: c, Clusters: weights.StaticState(c), Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Publish(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	client := extproctest.Serve(t, srv)
	adm := httptest.NewServer(admin.Handler(admin.Options{Config: c, Decisions: srv.Decisions()}))
	t.Cleanup(adm.Close)
	return &liveStack{srv: srv, client: client, w: w, admin: strings.TrimPrefix(adm.URL, "http://")}
}

// request plays one chat request from edge-us through ext_proc as Envoy
// would: headers, body, then (unless ILB answered itself) response
// headers that say served answered it.
func (s *liveStack) request(t *testing.T, id, model, served string) {
	t.Helper()
	extproctest.Play(t, s.client, extproctest.Exchange{Source: "edge-us", RequestID: id, Body: extproctest.Chat(model), Served: served, Version: s.w.Version()})
}

// drawn is the cluster slot 4242 falls in for (source, model).
func (s *liveStack) drawn(t *testing.T, source, model string) string {
	t.Helper()
	cell, _ := s.w.Cell(source, model)
	var begin uint32
	for _, tg := range cell.Targets {
		if 4242 < begin+tg.Weight {
			return tg.Cluster
		}
		begin += tg.Weight
	}
	t.Fatalf("no cluster for slot 4242 in %s/%s", source, model)
	return ""
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// checkOutcome checks a command's result: when ok, that it succeeded and
// its output holds want; else that its error does.
func checkOutcome(t *testing.T, out string, err error, want string, ok bool) {
	t.Helper()
	switch {
	case ok && err != nil:
		t.Fatal(err)
	case ok && !strings.Contains(out, want):
		t.Errorf("output lacks %q:\n%s", want, out)
	case !ok && (err == nil || !strings.Contains(err.Error(), want)):
		t.Errorf("err %v (output %q); want %q", err, out, want)
	}
}
