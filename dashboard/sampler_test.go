package dashboard

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ilbproject/ilb/decision"
	"github.com/ilbproject/ilb/weights"
)

// fakeWeights serves a settable weights version.
type fakeWeights struct {
	mu sync.Mutex
	w  *weights.Weights
}

func (f *fakeWeights) Current() *weights.Weights {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.w
}

func (f *fakeWeights) set(w *weights.Weights) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.w = w
}

// fakeLog is a decision log that records are appended to.
type fakeLog struct {
	mu   sync.Mutex
	recs []decision.Record // oldest first
}

func (f *fakeLog) add(rs ...decision.Record) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recs = append(f.recs, rs...)
}

func (f *fakeLog) Find(flt decision.Filter, n int) []decision.Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []decision.Record
	for i := len(f.recs) - 1; i >= 0 && len(out) < n; i-- {
		if flt.Match(&f.recs[i]) {
			out = append(out, f.recs[i])
		}
	}
	return out
}

// Tally counts the records appended after the first after, by reason (a
// fake log never evicts).
func (f *fakeLog) Tally(after uint64) decision.Tally {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := decision.Tally{Through: uint64(len(f.recs)), ByReason: map[string]int{}}
	if after >= t.Through {
		return t
	}
	for _, r := range f.recs[after:] {
		t.Records++
		t.ByReason[r.Reason]++
	}
	return t
}

func (f *fakeLog) Get(id string) (decision.Record, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.recs {
		if r.RequestID == id {
			return r, true
		}
	}
	return decision.Record{}, false
}

var (
	_ Weights   = (*fakeWeights)(nil)
	_ Decisions = (*fakeLog)(nil)
)

// split returns weights where (edge, m) sends a/10000 to c1, the rest to c2.
func split(t *testing.T, a uint32, shed float64) *weights.Weights {
	t.Helper()
	cells := []weights.Cell{{Source: "edge", Model: "m", Targets: []weights.Target{{Cluster: "c1", Weight: a}, {Cluster: "c2", Weight: weights.Total - a}}}}
	cells[0].Shed[weights.Sheddable] = shed
	w, err := weights.New("test", time.Unix(100, 0), cells)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func rec(id, reason, chosen string) decision.Record {
	return decision.Record{RequestID: id, Start: time.Unix(200, 0), Reason: reason, Chosen: chosen}
}

// TestSampler drives the sampler with a fake clock: the ring keeps the
// last Window/Interval samples, a version is recorded once per change and
// the history of versions is bounded, and each sample counts the
// decisions stored since the previous one (the first only notes where the
// log is).
func TestSampler(t *testing.T) {
	fw, fl := &fakeWeights{}, &fakeLog{}
	fw.set(split(t, 5000, 0))
	now := time.Unix(1000, 0)
	d := New(Options{Weights: fw, Decisions: fl, Interval: time.Second, Window: 4 * time.Second, MaxVersions: 2, Now: func() time.Time { return now }})
	fl.add(rec("old", "weighted", "c1"))

	steps := []struct {
		weights  *weights.Weights // nil: unchanged
		add      []decision.Record
		requests int
		shed     int
		rejected int
		versions int
	}{
		{versions: 1},
		{add: []decision.Record{rec("a", "weighted", "c1"), rec("b", "shed", ""), rec("c", "no_capacity", "")}, requests: 3, shed: 1, rejected: 1, versions: 1},
		{weights: split(t, 2500, 0.5), versions: 2},
		{add: []decision.Record{rec("a", "overloaded", "")}, requests: 1, shed: 1, versions: 2}, // an id seen before is a new record
		{weights: split(t, 1000, 0), add: []decision.Record{rec("d", "session", "c2")}, requests: 1, versions: 2},
		{versions: 2},
	}
	for i, st := range steps {
		if st.weights != nil {
			fw.set(st.weights)
		}
		fl.add(st.add...)
		now = now.Add(time.Second)
		d.sample(context.Background(), now)
		hs := d.history(time.Time{})
		s := hs[len(hs)-1]
		if s.Shed.Requests != st.requests || s.Shed.Shed != st.shed || s.Shed.Rejected != st.rejected {
			t.Errorf("step %d: shed sample %+v, want %d requests, %d shed, %d rejected", i, s.Shed, st.requests, st.shed, st.rejected)
		}
		if vs := d.versionList(10); len(vs) != st.versions || vs[0].Version != fw.Current().Version() {
			t.Errorf("step %d: %d versions (newest %s), want %d (newest %s)", i, len(vs), vs[0].Version, st.versions, fw.Current().Version())
		}
		if s.WeightsVersion != fw.Current().Version() {
			t.Errorf("step %d: sample of version %s, want %s", i, s.WeightsVersion, fw.Current().Version())
		}
	}
	hs := d.history(time.Time{})
	if len(hs) != 4 {
		t.Fatalf("%d samples kept, want 4", len(hs))
	}
	for i, s := range hs {
		if want := now.Add(time.Duration(i-3) * time.Second); !s.At.Equal(want) {
			t.Errorf("sample %d at %v, want %v (oldest first)", i, s.At, want)
		}
	}
	if got := d.history(now.Add(-time.Second)); len(got) != 2 {
		t.Errorf("history of the last second: %d samples, want 2", len(got))
	}
	if p := hs[1].Shed.Planned[weights.Sheddable]; p != 0.5 {
		t.Errorf("planned sheddable shed %v, want 0.5", p)
	}
}

// TestRunStops checks that Run samples at once and returns when its
// context is done.
func TestRunStops(t *testing.T) {
	fw := &fakeWeights{}
	fw.set(split(t, 5000, 0))
	d := New(Options{Weights: fw, Interval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for len(d.history(time.Time{})) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no sample within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestHandlerWithoutParts serves a dashboard with weights only: no config
// (the layout comes from the cells), no signals, no decision log.
func TestHandlerWithoutParts(t *testing.T) {
	fw := &fakeWeights{}
	srv := httptest.NewServer(New(Options{Weights: fw}).Handler())
	defer srv.Close()
	if status, body := fetch(t, srv.URL+"/ui/api/weights"); status != http.StatusServiceUnavailable {
		t.Errorf("weights before the first version: status %d: %s", status, body)
	}
	fw.set(split(t, 2500, 0))
	tests := []struct {
		path   string
		status int
	}{
		{"/ui/api/weights", http.StatusOK},
		{"/ui/api/clusters", http.StatusOK},
		{"/ui/api/history", http.StatusOK},
		{"/ui/api/versions", http.StatusOK},
		{"/ui/api/decisions", http.StatusServiceUnavailable},
		{"/ui/api/decisions/x", http.StatusServiceUnavailable},
		{"/ui", http.StatusOK}, // redirected to /ui/
	}
	for _, tc := range tests {
		if status, body := fetch(t, srv.URL+tc.path); status != tc.status {
			t.Errorf("GET %s: status %d, want %d: %s", tc.path, status, tc.status, body)
		}
	}
	var h Heatmap
	fetchJSON(t, srv.URL+"/ui/api/weights", &h)
	if len(h.Models) != 1 || len(h.Models[0].Rows) != 1 || len(h.Models[0].Rows[0].Cells) != 2 {
		t.Fatalf("heatmap %+v, want one model, one source, two clusters", h)
	}
	for i, want := range []float64{0.25, 0.75} {
		if c := h.Models[0].Rows[0].Cells[i]; c.Share != want {
			t.Errorf("cell %d (%s): share %v, want %v", i, c.Cluster, c.Share, want)
		}
	}
	var vs []Version
	fetchJSON(t, srv.URL+"/ui/api/versions", &vs)
	if len(vs) != 1 || vs[0].Version != fw.Current().Version() {
		t.Errorf("versions without a sampler: %+v, want the one in force", vs)
	}
}

// TestDownsample checks that downsampling keeps the first and the last
// sample and every request of the shed counts.
func TestDownsample(t *testing.T) {
	var ss []Sample
	total := 0
	for i := range 100 {
		s := Sample{At: time.Unix(int64(i), 0)}
		s.Shed.Requests, s.Shed.Shed = i, i/2
		total += i
		ss = append(ss, s)
	}
	for _, n := range []int{2, 3, 7, 99, 100, 500} {
		got := downsample(ss, n)
		if want := min(n, len(ss)); len(got) != want {
			t.Fatalf("n=%d: %d samples, want %d", n, len(got), want)
		}
		if !got[0].At.Equal(ss[0].At) || !got[len(got)-1].At.Equal(ss[99].At) {
			t.Errorf("n=%d: from %v to %v, want the first and the last", n, got[0].At, got[len(got)-1].At)
		}
		sum := 0
		for _, s := range got {
			sum += s.Shed.Requests
		}
		if sum != total {
			t.Errorf("n=%d: %d requests, want %d", n, sum, total)
		}
	}
}

// fetch GETs url over loopback (the handler tests of this package cannot
// use the demo tests' helpers: those live in package dashboard_test).
func fetch(t *testing.T, url string) (int, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// fetchJSON GETs url, wants a 200 and decodes the answer into v.
func fetchJSON(t *testing.T, url string, v any) {
	t.Helper()
	if status, b := fetch(t, url); status != http.StatusOK {
		t.Fatalf("GET %s: status %d: %s", url, status, b)
	} else if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, b)
	}
}
