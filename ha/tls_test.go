package ha_test

import (
	"context"
	"crypto/tls"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/auth"
	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/ha"
	"github.com/ilbproject/ilb/ha/etcdtest"
	"github.com/ilbproject/ilb/weights"
)

// TestTLS: with ha.tls a replica reaches an etcd that requires client
// certificates (mutual TLS) through the files the section names; without
// a client certificate etcd refuses it and the replica starts on the
// weights it computes alone, saying etcd did not answer.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := auth.NewDevCA("ilb.test")
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.IssueServer()
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.IssueClient("ilb")
	if err != nil {
		t.Fatal(err)
	}
	f := func(name string) string { return filepath.Join(dir, name) }
	if err := ca.WriteFiles(f("ca.pem"), f("ca-key.pem")); err != nil {
		t.Fatal(err)
	}
	if err := server.WriteFiles(f("etcd.pem"), f("etcd-key.pem")); err != nil {
		t.Fatal(err)
	}
	if err := client.WriteFiles(f("ilb.pem"), f("ilb-key.pem")); err != nil {
		t.Fatal(err)
	}
	e := etcdtest.StartTLS(t, 1, &etcdtest.TLS{
		CertFile: f("etcd.pem"), KeyFile: f("etcd-key.pem"), CAFile: f("ca.pem"),
		Client: &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{client.TLSCertificate()}, MinVersion: tls.VersionTLS12},
	})
	c, err := config.Decode([]byte(world))
	if err != nil {
		t.Fatal(err)
	}
	c.HA.Endpoints = e.Endpoints()
	c.HA.DialTimeout = config.Duration(2 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	first := routing(t, 1234, time.Now())

	tests := []struct {
		name    string
		tls     config.HATLS
		reaches bool
	}{
		{"client certificate", config.HATLS{CAFile: f("ca.pem"), CertFile: f("ilb.pem"), KeyFile: f("ilb-key.pem"), ServerName: "localhost"}, true},
		{"no client certificate", config.HATLS{CAFile: f("ca.pem")}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cc := *c
			h := *c.HA
			h.TLS = tt.tls
			cc.HA = &h
			if err := cc.Validate(); err != nil {
				t.Fatal(err)
			}
			r, err := ha.New(ha.Options{
				Config: &cc, Name: "tls", Sinks: []controller.Sink{&sink{}},
				Lead: func(ctx context.Context) error { <-ctx.Done(); return nil },
			})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if err := r.Bootstrap(ctx, func() (*weights.Weights, error) { return first, nil }); err != nil {
				t.Fatal(err)
			}
			st := r.Status()
			if st.EtcdReachable != tt.reaches {
				t.Fatalf("etcd reachable = %v (%s); want %v", st.EtcdReachable, st.EtcdError, tt.reaches)
			}
			if !tt.reaches {
				if !strings.Contains(r.Current().Status(), "etcd did not answer") {
					t.Fatalf("status of the first weights = %q; want it to say etcd did not answer", r.Current().Status())
				}
				return
			}
			rctx, rcancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- r.Run(rctx) }()
			defer func() {
				rcancel()
				if err := <-done; err != nil {
					t.Error(err)
				}
			}()
			for !r.Leading() {
				if ctx.Err() != nil {
					t.Fatal("never led over TLS")
				}
				time.Sleep(10 * time.Millisecond)
			}
			w := routing(t, 4321, time.Now())
			if _, err := r.Publisher().Prepare(ctx, w); err != nil {
				t.Fatal(err)
			}
			for r.Current().Version() != w.Version() {
				if ctx.Err() != nil {
					t.Fatal("the published version was not installed over TLS")
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}
