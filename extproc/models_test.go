package extproc_test

import (
	"encoding/json"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/ilbproject/ilb/extproc"
	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/internal/promtest"
)

// modelEntry is what the tests read of a model object.
type modelEntry struct {
	ID, Object, Root string
	OwnedBy          string `json:"owned_by"`
	MaxModelLen      int    `json:"max_model_len"`
}

// TestModelsAnsweredByILB: GET /v1/models and /v1/models/{id} are
// answered by ILB from its configuration — the same list on every call,
// aliases resolved, an escaped id decoded, the models a source may not
// reach left out — recorded (reason models) and never booked as demand;
// an unknown id is 404 model_not_found and another method 405.
func TestModelsAnsweredByILB(t *testing.T) {
	all := []string{"llama-3.1-8b-instruct", "llama3-8b", "meta-llama/Llama-3.1-8B-Instruct", "sql-lora", "qwen2.5-7b-instruct", "qwen-7b"}
	for _, tc := range []struct {
		name, source, method, path string
		status                     int
		reason                     string
		ids                        []string // the list's ids, or the one model's
		root                       string   // the one model's root
	}{
		{"the list", "edge-us", "GET", "/v1/models", 200, "models", all, ""},
		{"the list, trailing slash and query", "edge-eu", "GET", "/v1/models/?limit=5", 200, "models", all, ""},
		{"a model", "edge-us", "GET", "/v1/models/qwen2.5-7b-instruct", 200, "models", []string{"qwen2.5-7b-instruct"}, "qwen2.5-7b-instruct"},
		{"an alias", "edge-us", "GET", "/v1/models/qwen-7b", 200, "models", []string{"qwen-7b"}, "qwen2.5-7b-instruct"},
		{"an escaped id", "edge-us", "GET", "/v1/models/meta-llama%2FLlama-3.1-8B-Instruct", 200, "models", []string{"meta-llama/Llama-3.1-8B-Instruct"}, "llama-3.1-8b-instruct"},
		{"HEAD", "edge-us", "HEAD", "/v1/models", 200, "models", all, ""},
		{"an unknown model", "edge-us", "GET", "/v1/models/gpt-4o", 404, "model_not_found", nil, ""},
		{"POST", "edge-us", "POST", "/v1/models", 405, "method_not_allowed", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, true)
			var first []byte
			for call := range 2 {
				id := tc.name + "-" + string(rune('a'+call))
				resps := h.run(t, tc.source, reqHeaders(true, ":method", tc.method, ":path", tc.path, "x-request-id", id))
				ir := resps[len(resps)-1].GetImmediateResponse()
				if ir == nil {
					t.Fatalf("answer %v; want ILB's own (immediate) answer", resps[len(resps)-1])
				}
				if got := int(ir.GetStatus().GetCode()); got != tc.status {
					t.Fatalf("status %d, body %s; want %d", got, ir.GetBody(), tc.status)
				}
				if call == 1 && string(ir.GetBody()) != string(first) {
					t.Errorf("second call answered %s; the first %s", ir.GetBody(), first)
				}
				first = ir.GetBody()
				rec, ok := h.srv.Decisions().Get(id)
				if !ok || rec.Reason != tc.reason || rec.Status != tc.status || !rec.Complete || rec.Chosen != "" {
					t.Errorf("record %+v (found %v); want reason %s, status %d, complete, nothing chosen", rec, ok, tc.reason, tc.status)
				}
			}
			switch {
			case tc.status != 200:
			case tc.root == "":
				var list struct {
					Object string
					Data   []modelEntry
				}
				if err := json.Unmarshal(first, &list); err != nil || list.Object != "list" {
					t.Fatalf("list %s: %v", first, err)
				}
				var ids []string
				for _, m := range list.Data {
					ids = append(ids, m.ID)
					if m.Object != "model" || m.OwnedBy != "ilb" || m.Root == "" || m.MaxModelLen <= 0 {
						t.Errorf("model %+v: want object model, owned_by ilb, a root and max_model_len", m)
					}
				}
				if !slices.Equal(ids, tc.ids) {
					t.Errorf("ids %v; want %v", ids, tc.ids)
				}
			default:
				var m modelEntry
				if err := json.Unmarshal(first, &m); err != nil || m.ID != tc.ids[0] || m.Root != tc.root || m.Object != "model" {
					t.Errorf("model %s (%v); want id %s, root %s", first, err, tc.ids[0], tc.root)
				}
			}
			if counts, _ := h.meter.Flush(time.Unix(1700000001, 0)); len(counts) != 0 {
				t.Errorf("demand booked: %v; want none", counts)
			}
			promtest.Check(t, h.reg, "ilb_extproc_rejections_total", map[string]string{"source": tc.source, "status": strconv.Itoa(tc.status), "reason": tc.reason}, 2)
		})
	}
}

// TestModelsOfASource: a source lists only the models a cluster it may
// reach serves (here edge-eu, kept in eu-west, where no cluster serves
// qwen), and a retrieval of another is 404.
func TestModelsOfASource(t *testing.T) {
	h := startWith(t, true, func(o *extproc.Options) {
		for i := range o.Config.Clusters {
			if o.Config.Clusters[i].Region == "eu-west" {
				o.Config.Clusters[i].Models = []string{"llama-3.1-8b-instruct"}
			}
		}
	})
	list := func(source string) []string {
		resps := h.run(t, source, reqHeaders(true, ":method", "GET", ":path", "/v1/models"))
		var l struct{ Data []modelEntry }
		if err := json.Unmarshal(resps[0].GetImmediateResponse().GetBody(), &l); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range l.Data {
			ids = append(ids, m.ID)
		}
		return ids
	}
	if got, want := list("edge-eu"), []string{"llama-3.1-8b-instruct", "llama3-8b", "meta-llama/Llama-3.1-8B-Instruct", "sql-lora"}; !slices.Equal(got, want) {
		t.Errorf("edge-eu lists %v; want %v", got, want)
	}
	if got := list("edge-us"); len(got) != 6 {
		t.Errorf("edge-us lists %v; want every model", got)
	}
	resps := h.run(t, "edge-eu", reqHeaders(true, ":method", "GET", ":path", "/v1/models/qwen-7b"))
	if got := resps[0].GetImmediateResponse().GetStatus().GetCode(); got != 404 {
		t.Errorf("edge-eu: qwen-7b answered %d; want 404", got)
	}
}

// TestGetNotDemand: a GET routed to an engine (a file, a batch's
// status), and a POST to a bookkeeping endpoint (a file upload, a batch,
// tokenizing), book no demand; the inference POST after them does.
func TestGetNotDemand(t *testing.T) {
	h := start(t, true)
	for _, tc := range []struct{ name, method, path, contentLength string }{
		{"a file's GET", "GET", "/v1/files/file-abc", ""},
		{"a file upload", "POST", "/v1/files", "50000000"},
		{"a batch", "POST", "/v1/batches?x=1", "300"},
		{"tokenizing", "POST", "/v1/tokenize", "4000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := []string{":method", tc.method, ":path", tc.path, "x-request-id", tc.name, header.Model, "qwen-7b"}
			if tc.contentLength != "" {
				kv = append(kv, "content-length", tc.contentLength)
			}
			resps := h.run(t, "edge-us", reqHeaders(tc.method == "GET", kv...))
			if resps[0].GetRequestHeaders().GetResponse().GetHeaderMutation() == nil {
				t.Fatalf("answer %v; want the request routed", resps[0])
			}
			if rec, _ := h.srv.Decisions().Get(tc.name); rec.TokenCost != 0 || rec.DemandBooked != 0 || rec.Chosen == "" {
				t.Errorf("record %+v; want routed, no token cost, nothing booked", rec)
			}
			if counts, _ := h.meter.Flush(time.Unix(1700000001, 0)); len(counts) != 0 {
				t.Errorf("demand booked: %v", counts)
			}
		})
	}
	h.run(t, "edge-us", post("/v1/chat/completions"), reqBody(`{"model":"qwen-7b","messages":[{"role":"user","content":"hi"}]}`))
	if counts, _ := h.meter.Flush(time.Unix(1700000002, 0)); len(counts) != 1 {
		t.Errorf("demand after a POST: %v; want one stream", counts)
	}
}
