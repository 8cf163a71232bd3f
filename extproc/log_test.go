package extproc

import (
	"errors"
	"strconv"
	"testing"

	"github.com/ilbproject/ilb/config"
	"github.com/ilbproject/ilb/weights"
)

func TestLogRing(t *testing.T) {
	l := NewLog(3)
	for i := range 5 {
		l.add(&Record{RequestID: "r" + strconv.Itoa(i)})
	}
	for _, tt := range []struct {
		id   string
		kept bool
	}{{"r0", false}, {"r1", false}, {"r2", true}, {"r3", true}, {"r4", true}} {
		if _, ok := l.Get(tt.id); ok != tt.kept {
			t.Errorf("Get(%s) kept = %v; want %v", tt.id, ok, tt.kept)
		}
	}
	recent := l.Recent(10)
	if len(recent) != 3 || recent[0].RequestID != "r4" || recent[2].RequestID != "r2" {
		t.Errorf("Recent = %v; want r4, r3, r2", recent)
	}
	// A later record with the same id wins; evicting the older one must
	// not drop the newer from the index.
	l.add(&Record{RequestID: "r2", Model: "new"})
	l.add(&Record{RequestID: "x"})
	if r, ok := l.Get("r2"); !ok || r.Model != "new" {
		t.Errorf("Get(r2) = %+v, %v; want the newer record", r, ok)
	}
}

func TestPickMatchesEnvoy(t *testing.T) {
	c := newCell(&config.Config{}, config.Source{}, "m", cellOf(3000, 7000))
	for _, tt := range []struct {
		draw uint64
		want string
	}{{0, "a"}, {2999, "a"}, {3000, "b"}, {9999, "b"}, {10000, "a"}, {13000, "b"}, {^uint64(0), "a"}} {
		// ^uint64(0) % 10000 = 1615
		got, slot := c.pick(tt.draw)
		if got != tt.want || slot != tt.draw%10000 {
			t.Errorf("pick(%d) = %s, slot %d; want %s", tt.draw, got, slot, tt.want)
		}
	}
}

func FuzzParseBody(f *testing.F) {
	f.Add(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":5}`)
	f.Add(`{"model":null}`)
	f.Add(`[]`)
	f.Add(`{"model":"m","prompt":["a","b"],"user":"u","max_completion_tokens":-1}`)
	f.Fuzz(func(t *testing.T, s string) {
		for _, ep := range []Endpoint{EndpointChat, EndpointCompletions, EndpointEmbeddings, EndpointOther} {
			b, err := parseBody(ep, []byte(s))
			if err != nil {
				var re *RequestError
				if !errors.As(err, &re) || re.Status != 400 || re.Msg == "" {
					t.Fatalf("parseBody(%q) error %v is not a 400 RequestError", s, err)
				}
				continue
			}
			if b.Model == "" || b.PromptTokens < 1 || b.MaxTokens < 0 {
				t.Fatalf("parseBody(%q) = %+v", s, b)
			}
		}
	})
}

func cellOf(wa, wb uint32) weights.Cell {
	return weights.Cell{Targets: []weights.Target{{Cluster: "a", Weight: wa}, {Cluster: "b", Weight: wb}}}
}
