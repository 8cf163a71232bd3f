package ha

import (
	"errors"
	"testing"
	"time"

	"github.com/ilbproject/ilb/weights"
)

func TestWeightsEncoding(t *testing.T) {
	w, err := weights.New("test", time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), []weights.Cell{
		{
			Source: "s", Model: "m", Targets: []weights.Target{{Cluster: "a", Weight: 2500}, {Cluster: "b", Weight: 7500}},
			Shed: weights.ShedFractions{0, 0.1 + 0.2, 1}, Demand: 12.5, Served: 10,
			Explanation: &weights.Explanation{Policy: "test", Summary: "why"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	w = w.WithStatus("note")
	blob, m, err := encodeWeights(w)
	if err != nil {
		t.Fatal(err)
	}
	if m.Chunks != 1 || m.Size != len(blob) || len(chunks(blob)) != 1 {
		t.Fatalf("meta %+v for %d bytes", m, len(blob))
	}
	got, err := decodeWeights(w.Version(), m, blob)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version() != w.Version() || got.Status() != "note" || !got.Computed().Equal(w.Computed()) {
		t.Fatalf("decoded %s %q %s; want %s %q %s", got.Version(), got.Status(), got.Computed(), w.Version(), w.Status(), w.Computed())
	}
	if e, ok := got.Explain("s", "m"); !ok || e.Summary != "why" {
		t.Errorf("explanation = %+v, %v; want it carried", e, ok)
	}

	tests := []struct {
		name    string
		version string
		mutate  func([]byte) []byte
		meta    func(meta) meta
	}{
		{"another version", "0123456789abcdef", nil, nil},
		{"altered byte", w.Version(), func(b []byte) []byte { b[len(b)/2] ^= 1; return b }, nil},
		{"cut short", w.Version(), func(b []byte) []byte { return b[:len(b)-1] }, nil},
		{
			"meta lies about the hash", w.Version(), func(b []byte) []byte { b[len(b)/2] ^= 1; return b },
			func(m meta) meta { m.SHA256 = "00"; return m },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := append([]byte(nil), blob...)
			mm := m
			if tt.mutate != nil {
				b = tt.mutate(b)
			}
			if tt.meta != nil {
				mm = tt.meta(mm)
			}
			if _, err := decodeWeights(tt.version, mm, b); !errors.Is(err, ErrContentMismatch) {
				t.Fatalf("err = %v, want ErrContentMismatch", err)
			}
		})
	}
}

func TestMetaBounds(t *testing.T) {
	for _, tt := range []struct{ name, json string }{
		{"encoding", `{"encoding":"xml","chunks":1,"size":10,"sha256":"x"}`},
		{"size zero", `{"encoding":"json+gzip","chunks":0,"size":0,"sha256":"x"}`},
		{"too large", `{"encoding":"json+gzip","chunks":129,"size":67108865,"sha256":"x"}`},
		{"chunk count", `{"encoding":"json+gzip","chunks":2,"size":10,"sha256":"x"}`},
		{"unknown field", `{"encoding":"json+gzip","chunks":1,"size":10,"sha256":"x","more":1}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := decodeMeta([]byte(tt.json)); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	if m, err := decodeMeta([]byte(`{"encoding":"json+gzip","chunks":2,"size":524289,"sha256":"x"}`)); err != nil || m.Chunks != 2 {
		t.Fatalf("a valid meta: %+v, %v", m, err)
	}
}

func TestChunks(t *testing.T) {
	b := make([]byte, 2*chunkBytes+1)
	cs := chunks(b)
	if len(cs) != 3 || len(cs[0]) != chunkBytes || len(cs[2]) != 1 {
		t.Fatalf("chunks of %d bytes: %d", len(b), len(cs))
	}
}

func TestDefaultName(t *testing.T) {
	if n := DefaultName(); !namePattern.MatchString(n) {
		t.Fatalf("DefaultName() = %q is not a valid replica name", n)
	}
}
