package admin_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ilbproject/ilb/admin"
	"github.com/ilbproject/ilb/controller"
	"github.com/ilbproject/ilb/weights"
)

type entry struct {
	Version  string                 `json:"version"`
	Previous string                 `json:"previous"`
	Status   string                 `json:"status"`
	Changes  []controller.CellDiff  `json:"changes"`
	Cells    []controller.CellRoute `json:"cells"`
}

// publishAll records one version per element of splits in a History:
// cell (s1, m) gets a/b split, (s2, m) the opposite.
func publishAll(t *testing.T, splits ...uint32) (*controller.History, []string) {
	t.Helper()
	h := controller.NewHistory(0, nil)
	var versions []string
	for _, a := range splits {
		w, err := weights.New("test", time.Now(), []weights.Cell{
			{Source: "s1", Model: "m", Targets: []weights.Target{{Cluster: "a", Weight: a}, {Cluster: "b", Weight: weights.Total - a}}},
			{Source: "s2", Model: "m", Targets: []weights.Target{{Cluster: "a", Weight: weights.Total - a}, {Cluster: "b", Weight: a}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		commit, err := h.Prepare(context.Background(), w)
		if err != nil {
			t.Fatal(err)
		}
		commit()
		versions = append(versions, w.Version())
	}
	return h, versions
}

func TestWeightsHistory(t *testing.T) {
	h, v := publishAll(t, 5000, 4000, 3000)
	srv := httptest.NewServer(admin.Handler(admin.Options{History: h}))
	defer srv.Close()
	tests := []struct {
		name     string
		query    string
		versions []string
		previous []string
		cells    int // per entry
		changes  int // in the newest entry
	}{
		{"default limit: every version, the oldest without previous", "", []string{v[2], v[1], v[0]}, []string{v[1], v[0], ""}, 2, 2},
		{"limit keeps the predecessor", "limit=1", []string{v[2]}, []string{v[1]}, 2, 2},
		{"one cell", "source=s1&model=m", []string{v[2], v[1], v[0]}, []string{v[1], v[0], ""}, 1, 1},
		{"unknown source: versions without cells", "source=nope", []string{v[2], v[1], v[0]}, []string{v[1], v[0], ""}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := getBody(t, srv.URL+"/debug/weights/history?"+tt.query)
			if status != 200 {
				t.Fatalf("status %d: %s", status, body)
			}
			var es []entry
			if err := json.Unmarshal([]byte(body), &es); err != nil {
				t.Fatal(err)
			}
			if len(es) != len(tt.versions) {
				t.Fatalf("%d entries; want %d: %s", len(es), len(tt.versions), body)
			}
			for i, e := range es {
				if e.Version != tt.versions[i] || e.Previous != tt.previous[i] || len(e.Cells) != tt.cells {
					t.Errorf("entry %d = %s after %q, %d cells; want %s after %q, %d cells", i, e.Version, e.Previous, len(e.Cells), tt.versions[i], tt.previous[i], tt.cells)
				}
			}
			if got := len(es[0].Changes); got != tt.changes {
				t.Fatalf("newest entry: %d changes; want %d: %+v", got, tt.changes, es[0].Changes)
			}
			if tt.changes > 0 {
				c := es[0].Changes[0]
				if c.Source != "s1" || len(c.Clusters) != 2 || c.Clusters[0] != (controller.WeightChange{Cluster: "a", Before: 4000, After: 3000}) {
					t.Errorf("changes[0] = %+v; want s1 a 4000 -> 3000", c)
				}
			}
		})
	}
}

func TestWeightsHistoryErrors(t *testing.T) {
	h, _ := publishAll(t, 5000)
	tests := []struct {
		name   string
		opts   admin.Options
		query  string
		status int
		msg    string
	}{
		{"bad limit", admin.Options{History: h}, "limit=lots", 400, `limit \"lots\"`},
		{"limit too large", admin.Options{History: h}, "limit=1001", 400, "1..1000"},
		{"no history", admin.Options{}, "", 404, "no weights history"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(admin.Handler(tt.opts))
			defer srv.Close()
			status, body := getBody(t, srv.URL+"/debug/weights/history?"+tt.query)
			if status != tt.status || !strings.Contains(body, tt.msg) {
				t.Errorf("got %d %s; want %d with %q", status, body, tt.status, tt.msg)
			}
		})
	}
}
