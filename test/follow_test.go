package test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ilbproject/ilb/decision"
	"github.com/ilbproject/ilb/demand"
	"github.com/ilbproject/ilb/sim/engine"
	"github.com/ilbproject/ilb/weights"
)

// TestAbandonedStreamsAddOnlyTheirShare is the black-box reproduction of
// streams inflating demand: chat streams claiming max_tokens=4096 whose
// clients hang up after the first event, through envoysim, ILB and the
// engines. Each counts its provisional share (an ordinary request: 1,500
// units with the demo's defaults), not its 16,000-unit claim; requests
// served to their end count what the engines generated, from the usage
// the engines sent, and their clients get the whole stream even where
// ILB stopped following it.
func TestAbandonedStreamsAddOnlyTheirShare(t *testing.T) {
	timing := engine.DefaultFixedTiming()
	s := startWorld(t, &timing, nil)
	us := envoyURL(t, s, "edge-us")
	const (
		abandoned   = 20
		provisional = 500 + 250*4 // the demo's default prompt and output
	)
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		ids = map[string]string{} // ours -> Envoy's x-request-id
	)
	// Envoy sets its own x-request-id (ILB's listener does not preserve a
	// client's) and returns it.
	idOf := func(ours string, resp *http.Response) {
		mu.Lock()
		ids[ours] = resp.Header.Get("X-Request-Id")
		mu.Unlock()
	}
	for i := range abandoned {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			body := fmt.Sprintf(`{"model":"llama3-8b","stream":true,"max_tokens":4096,"messages":[{"role":"user","content":"abandon %d"}]}`, i)
			resp := postChat(ctx, t, us+"/v1/chat/completions", body, fmt.Sprintf("abandon-%d", i))
			if resp == nil {
				return
			}
			defer resp.Body.Close()
			idOf(fmt.Sprintf("abandon-%d", i), resp)
			line, err := bufio.NewReader(resp.Body).ReadString('\n')
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(line, "data: ") {
				t.Errorf("abandon-%d: %d %q %v; want 200 and an event", i, resp.StatusCode, line, err)
			}
			// Hang up after the first event.
		})
	}
	// Served to their end, with the usage the engine sends: 600 tokens of
	// a 600-token claim, so ILB stops following at the last token and the
	// usage and [DONE] go straight to the client.
	served := map[string]string{
		"served-stream": `{"model":"llama3-8b","stream":true,"stream_options":{"include_usage":true},"max_tokens":600,"messages":[{"role":"user","content":"serve"}]}`,
		"served-json":   `{"model":"llama3-8b","max_tokens":600,"messages":[{"role":"user","content":"serve"}]}`,
	}
	for id, body := range served {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			resp := postChat(ctx, t, us+"/v1/chat/completions", body, id)
			if resp == nil {
				return
			}
			defer resp.Body.Close()
			idOf(id, resp)
			got, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Errorf("%s: %d %v", id, resp.StatusCode, err)
				return
			}
			want := `"completion_tokens":600`
			if strings.Contains(body, `"stream":true`) {
				want = "data: [DONE]"
				if n := strings.Count(string(got), `"delta"`); n < 600 {
					t.Errorf("%s: %d token events; want 600 (ILB stopped following: the rest must still reach the client)", id, n)
				}
			}
			if !strings.Contains(string(got), want) {
				t.Errorf("%s: the body has no %s: %.300s…", id, want, got)
			}
		})
	}
	wg.Wait()

	x := s.App.ExtProc
	record := func(ours string) (decision.Record, bool) { return x.Decisions().Get(ids[ours]) }
	var records []string
	settled := func() bool {
		records = records[:0]
		done := true
		for _, id := range slices.Sorted(maps.Keys(ids)) {
			rec, ok := record(id)
			switch {
			case !ok:
				records = append(records, id+": no record")
				done = false
			case rec.Generated == nil:
				records = append(records, fmt.Sprintf("%s: status %d, booked %v of %v, not settled", id, rec.Status, rec.DemandBooked, rec.TokenCost))
				done = false
			default:
				records = append(records, fmt.Sprintf("%s: status %d, booked %v of %v, %+v", id, rec.Status, rec.DemandBooked, rec.TokenCost, *rec.Generated))
			}
		}
		return done
	}
	for deadline := time.Now().Add(time.Minute); !settled(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not every request's demand is settled within a minute:\n%s", strings.Join(records, "\n"))
		}
	}
	for i := range abandoned {
		rec, _ := record(fmt.Sprintf("abandon-%d", i))
		if rec.DemandBooked != provisional || rec.Generated.Outcome != "ended" {
			t.Errorf("%s: booked %v, generated %+v; want the provisional %d, ended (claim %v)", rec.RequestID, rec.DemandBooked, *rec.Generated, provisional, rec.TokenCost)
		}
	}
	for id := range served {
		rec, _ := record(id)
		g := *rec.Generated
		// The engine's usage counts the prompt its way: what is booked is
		// its prompt and the 600 tokens, within the estimate — or more, by
		// at most the difference of ILB's prompt estimate, when steps were
		// booked on the events before the usage came (booking never goes
		// back: a report interval already sent cannot be taken back).
		// Or, when the last token event came in a chunk of its own, ILB
		// booked the whole estimate on the events and stopped following
		// before the usage.
		least := min(float64(g.PromptTokens)+600*4, rec.TokenCost)
		switch {
		case g.From == "events" && g.Outcome == "confirmed":
			if rec.DemandBooked != rec.TokenCost {
				t.Errorf("%s: booked %v of %v, generated %+v; want all of it", id, rec.DemandBooked, rec.TokenCost, g)
			}
		case g.From != "usage" || g.Tokens != 600 || rec.DemandBooked < least || rec.DemandBooked > rec.TokenCost:
			t.Errorf("%s: booked %v of %v, generated %+v; want %v to %v from the usage's 600 tokens", id, rec.DemandBooked, rec.TokenCost, g, least, rec.TokenCost)
		}
	}
	// What the controller plans on: every request once, abandoned ones at
	// their provisional share.
	key := demand.Key{Source: "edge-us", Model: "llama-3.1-8b-instruct", Priority: weights.Standard}
	var want float64
	for id := range served {
		rec, _ := record(id)
		want += rec.DemandBooked
	}
	want += abandoned * provisional
	waitUntil(t, "the demand reports reach the controller", time.Minute, func() bool {
		for _, tot := range s.App.Demand.Status().Totals {
			if tot.Key == key {
				return tot.Requests == abandoned+uint64(len(served)) && tot.TokenCost == want
			}
		}
		return false
	})
	if t.Failed() {
		settled()
		t.Logf("records:\n%s", strings.Join(records, "\n"))
	}
}

// postChat sends a chat request; nil when it failed (reported under id).
func postChat(ctx context.Context, t *testing.T, url, body, id string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Error(err)
		return nil
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("%s: %v", id, err)
		return nil
	}
	return resp
}
