package extproc

import (
	"bytes"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/proto"

	"github.com/ilbproject/ilb/header"
)

// TestVerdictWire: a decision's answer as ILB encodes it is, byte for
// byte, what proto.Marshal writes for its message — either side, with or
// without re-matching, override hosts, values long enough for two-byte
// lengths — and a response holding what the encoding does not write is
// left to marshalling.
func TestVerdictWire(t *testing.T) {
	long := strings.Repeat("v", 200)
	for _, hosts := range [][]string{nil, {"10.0.0.1:8000"}, {"10.0.0.1:8000", "[fd00::2]:8000", "10.0.0.3:8000"}, {long}} {
		for _, model := range []string{"llama-3.1-8b-instruct", long} {
			for _, rematch := range []bool{true, false} {
				for _, side := range []string{"headers", "body"} {
					v := new(verdict)
					if hosts != nil {
						v.setHosts(hosts)
					}
					mut := v.mutation(sharedHeader(header.RouteModel, model), 1<<63+12345, sharedHeader(header.RouteCluster, "us-east-vllm"))
					resp := v.bodyResponse(mut, rematch)
					if side == "headers" {
						resp = v.headersResponse(mut, rematch)
					}
					want, err := proto.Marshal(resp)
					if err != nil {
						t.Fatal(err)
					}
					e := v.encoded()
					if e == nil || e.ProcessingResponse != resp || !bytes.Equal(e.wire, want) {
						t.Fatalf("%s, hosts %v, model of %d bytes, rematch %v: encoded %x\nproto.Marshal %x", side, hosts, len(model), rematch, e.wire, want)
					}
					if v.encoded() != e {
						t.Error("a second call encoded again")
					}
				}
			}
		}
	}
	v := new(verdict)
	resp := v.headersResponse(v.mutation(sharedHeader(header.RouteModel, "m"), 1, sharedHeader(header.RouteCluster, "c")), true)
	resp.ModeOverride = skipBody()
	if v.encoded() != nil {
		t.Error("a response with a mode override was encoded")
	}
	v = new(verdict)
	mut := v.mutation(&corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "k", Value: "v"}}, 1, sharedHeader(header.RouteCluster, "c"))
	v.bodyResponse(mut, true)
	if v.encoded() != nil {
		t.Error("an option with a value (not a raw value) was encoded")
	}
}

// TestWireCodec: the codec sends an encoded answer's bytes as they are,
// marshals any other message as gRPC's proto codec does, and the shared
// answers' bytes are theirs.
func TestWireCodec(t *testing.T) {
	c := newWireCodec()
	if c == nil {
		t.Fatal("no proto codec registered")
	}
	e := &encoded{ProcessingResponse: continueHeaders, wire: []byte("as is")}
	out, err := c.Marshal(e)
	if err != nil || !bytes.Equal(out.Materialize(), []byte("as is")) {
		t.Errorf("Marshal(encoded) = %q, %v; want its bytes", out.Materialize(), err)
	}
	for _, w := range sharedWire {
		want, err := proto.Marshal(w.ProcessingResponse)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(w.wire, want) {
			t.Errorf("shared answer %v: %x; proto.Marshal %x", w.ProcessingResponse, w.wire, want)
		}
		out, err := c.Marshal(w.ProcessingResponse)
		if err != nil || !bytes.Equal(out.Materialize(), want) {
			t.Errorf("Marshal(%v) = %x, %v; want %x", w.ProcessingResponse, out.Materialize(), err, want)
		}
		var back extprocv3.ProcessingResponse
		if err := c.Unmarshal(out, &back); err != nil || !proto.Equal(&back, w.ProcessingResponse) {
			t.Errorf("Unmarshal = %v, %v; want %v", &back, err, w.ProcessingResponse)
		}
	}
	if len(sharedWire) != 7 {
		t.Errorf("%d shared answers encoded; want 7", len(sharedWire))
	}
}
