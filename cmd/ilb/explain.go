package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ilbproject/ilb/decision"
	"github.com/ilbproject/ilb/picker"
)

// runExplain prints the story of one request from the admin API.
func runExplain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	af := addAdminFlags(fs)
	asJSON := fs.Bool("json", false, "print the decision record as JSON")
	traceURL := fs.String("trace-url", os.Getenv("ILB_TRACE_URL"),
		"link template of a trace, {trace_id} and {span_id} substituted (e.g. http://localhost:16686/trace/{trace_id}); default $ILB_TRACE_URL")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("explain: want exactly one REQUEST_ID (the x-request-id of the request)")
	}
	client, err := af.client()
	if err != nil {
		return fmt.Errorf("explain: %w", err)
	}
	rec, raw, err := fetchRecordFrom(ctx, client, fs.Arg(0))
	if err != nil {
		return err
	}
	if *asJSON {
		_, err := stdout.Write(raw)
		return err
	}
	printStory(stdout, rec, *traceURL)
	return nil
}

// fetchRecord asks the admin API at adminAddr (plain HTTP) for the
// decision record of id.
func fetchRecord(ctx context.Context, adminAddr, id string) (decision.Record, []byte, error) {
	return fetchRecordFrom(ctx, plainAdmin(adminAddr), id)
}

// fetchRecordFrom asks the admin API for the decision record of id.
func fetchRecordFrom(ctx context.Context, c *adminClient, id string) (decision.Record, []byte, error) {
	body, err := c.get(ctx, "/debug/decisions/"+url.PathEscape(id), 5*time.Second, 1<<20)
	if err != nil {
		return decision.Record{}, nil, fmt.Errorf("explain: %w", err)
	}
	var rec decision.Record
	if err := json.Unmarshal(body, &rec); err != nil {
		return decision.Record{}, nil, fmt.Errorf("explain: decode record: %w", err)
	}
	return rec, body, nil
}

// reasonMeaning says what each routing reason code means.
var reasonMeaning = map[string]string{
	"weighted":        "a random draw over the weights",
	"session":         "the draw is the session key's hash: the session sticks to one cluster",
	"redrawn":         "the drawn cluster is excluded now: drawn again among the rest",
	"balanced":        "another reachable cluster would begin this request sooner, round trip included, by the larger of the work ILB has waiting there and the queue its engines report: it took the request (join the shortest queue)",
	"within_target":   "the cluster it was going to could not give its first token within the TTFT target (controller.capacity.ttft_target), by its queue and this prompt's prefill there (a slower GPU, a long prompt): drawn again among the clusters that could",
	"steered":         "the drawn cluster's engines (without a TTFT histogram) queue more per running request than another's: moved to one with less, with the probability the difference justifies",
	"models":          "the model list, answered from ILB's configuration: no engine saw it, and it is not demand",
	"shed":            "the controller planned to shed part of this priority (its tenant's share of it, with fair shedding), the engines confirmed the overload (the cluster it would go to was overloaded), and its first token was predicted past the TTFT target there",
	"overloaded":      "the engines measured an overload no plan sized yet: every cluster saturated (a sheddable request), or its tenant asked for more than an equal share (the part above it refused)",
	"budget_exceeded": "its tenant's token budget (tenants.budgets) for this minute or day was spent, counting what the requests in flight hold: refused until the window ends, and not demand",
}

// localReplyMeaning says why Envoy answers a request with status itself
// before ILB decides.
func localReplyMeaning(status int) string {
	switch status {
	case 413:
		return "the body is over envoy.request_buffer_bytes, the most Envoy buffers for ext_proc (ILB's JSON 413 request_too_large)"
	case 408:
		return "the client did not send its body within Envoy's request timeout"
	}
	return "a filter before ILB's decision answered (see Envoy's access log for its response code details)"
}

// printRecord writes a decision record for people, without a trace link.
func printRecord(w io.Writer, r decision.Record) { printStory(w, r, "") }

// printStory writes a decision record for people: who asked for what, the
// candidates and where the draw fell, what ILB chose and what Envoy
// served, and the trace; traceURL is a link template ("" for none).
func printStory(w io.Writer, r decision.Record, traceURL string) {
	p := func(k, f string, a ...any) { fmt.Fprintf(w, "%-11s %s\n", k, fmt.Sprintf(f, a...)) }
	p("request", "%s  %s %s  at %s", r.RequestID, r.Method, r.Path, r.Start.UTC().Format(time.RFC3339Nano))
	prio := map[string]string{
		"header":         ", from x-ilb-priority",
		"ignored-header": ", the source's default: its x-ilb-priority was ignored (the source does not trust it)",
		"default":        ", the source's default",
	}[r.PriorityFrom]
	p("source", "%s  (priority %s%s)", r.Source, r.Priority, prio)
	switch {
	case r.TenantFrom == "ignored-header":
		p("tenant", "none: its x-ilb-tenant was ignored (the source does not trust it)")
	case r.Tenant != "" && (r.TenantDemand > 0 || r.TenantFair > 0 || r.TenantShed > 0):
		p("tenant", "%s, from x-ilb-tenant: %.0f%% of its priority's demand here, fair share %.0f%%; %.0f%% of its requests shed by the plan (fair shedding)",
			r.Tenant, 100*r.TenantDemand, 100*r.TenantFair, 100*r.TenantShed)
	case r.Tenant != "":
		p("tenant", "%s, from x-ilb-tenant", r.Tenant)
	}
	if r.Model != "" {
		asked := ""
		if r.RequestedModel != r.Model {
			asked = fmt.Sprintf(" (asked for %q)", r.RequestedModel)
		}
		how := map[string]string{
			"body":    "read from the body",
			"header":  "from x-ilb-model, body not read",
			"default": "the request names none: the source's default model",
		}[r.ModelFrom]
		maxTokens := "max_tokens unset"
		if r.MaxTokens > 0 {
			maxTokens = fmt.Sprintf("max_tokens %d", r.MaxTokens)
		}
		p("model", "%s%s, %s; stream %v, %s, ~%d prompt tokens", r.Model, asked, how, r.Stream, maxTokens, r.PromptTokens)
		if r.Adapter != "" {
			p("adapter", "LoRA adapter %s of %s: the base model's demand and weights, only the clusters that serve the adapter, a replica that has it loaded first", r.Adapter, r.Model)
		}
	}
	if r.TokenCost > 0 {
		p("demand", "%.0f token-cost units estimated (capped by the model's limits); booked as demand: %s", r.TokenCost, bookedText(r))
	}
	if r.SessionHash != "" {
		p("session", "key from %s, hash %s: the draw is the hash, so the session sticks to one cluster", r.SessionFrom, r.SessionHash)
	} else if r.Chosen != "" {
		p("session", "none: a random draw")
	}
	if r.TraceID != "" {
		if r.SpanID != "" {
			p("trace", "%s (span %s)", r.TraceID, r.SpanID)
		} else {
			p("trace", "%s", r.TraceID)
		}
		if traceURL != "" {
			p("", "%s", strings.NewReplacer("{trace_id}", r.TraceID, "{span_id}", r.SpanID).Replace(traceURL))
		}
	}
	p("weights", "version %s", orDash(r.WeightsVersion))
	printCandidates(w, r)
	switch {
	case r.Chosen != "":
		p("draw", "%d (%s) -> slot %d of %d", r.Draw, r.DrawFrom, r.Slot, r.TotalWeight)
		if r.Redrawn != "" {
			p(r.Reason, "%s", r.Redrawn)
		}
		if why := reasonMeaning[r.Reason]; why != "" {
			p("chosen", "%s (reason %s: %s)", r.Chosen, r.Reason, why)
		} else {
			p("chosen", "%s (reason %s)", r.Chosen, r.Reason)
		}
	case r.Reason == "local_reply":
		p("answered", "%d by Envoy itself, before ILB decided: %s", r.Status, localReplyMeaning(r.Status))
	case r.Status != 0 && reasonMeaning[r.Reason] != "":
		p("answered", "%d by ILB itself (reason %s: %s)", r.Status, r.Reason, reasonMeaning[r.Reason])
	case r.Status != 0:
		p("answered", "%d by ILB itself (reason %s)", r.Status, r.Reason)
	default:
		p("decided", "reason %s, never seen by the client", r.Reason)
	}
	if r.ShedWaived > 0 {
		p("shed", "%s", waivedText(r))
	}
	printReplica(p, r.Replica)
	switch {
	case r.Unanswered != "":
		p("UNANSWERED", "%s", r.Unanswered)
	case !r.Complete:
		p("served", "no response yet (in flight, or the client went away)")
	case r.ServedCluster != "":
		p("served", "%s at %s, weights %s, status %d", r.ServedCluster, orDash(r.UpstreamHost), orDash(r.ServedVersion), r.Status)
		if r.Mismatch {
			p("WARNING", "Envoy served %s, not %s (its routes are weights %s, ILB decided on %s): a route without ILB's headers matched, or Envoy could not follow the cluster ILB named", r.ServedCluster, r.Chosen, orDash(r.ServedVersion), r.WeightsVersion)
		}
	case r.Chosen != "":
		p("served", "status %d, no served-cluster report (a local reply from Envoy)", r.Status)
		if r.Mismatch {
			p("WARNING", "ILB chose %s, but the response names no served cluster: a route without ILB's headers matched, or Envoy answered locally", r.Chosen)
		}
	}
	p("timing", "decision %dµs, request to response headers %.1f ms", r.DecisionMicros, r.TotalMillis)
}

// printReplica writes the replica decision inside the chosen cluster
// (clusters with replica picking).
func printReplica(p func(label, format string, args ...any), rd *decision.ReplicaDecision) {
	if rd == nil {
		return
	}
	if rd.Chosen == "" {
		p("replica", "left to Envoy's least request: %s", rd.Skipped)
		return
	}
	why := map[string]string{
		"prefix":  "it holds more of the prompt than the least-loaded replica, and that outweighs its queue",
		"session": "it served the session's last request (the prompt was not read) and holds it, which outweighs its queue",
		"load":    "the least work (queued prefill, decode in flight, prompt not cached), no better cache hit elsewhere",
		"only":    "the one serving replica",
	}[rd.Reason]
	c := rd.Terms
	p("replica", "%s (reason %s: %s)", rd.Chosen, rd.Reason, why)
	from := fmt.Sprintf("of %d blocks hashed", rd.PromptBlocks)
	if c.Session {
		from = "by the session key (headers only)"
	}
	p("", "~%d prompt tokens cached %s; %d in flight, %d prefill tokens queued, %.0f of decode work; cost %.0f tokens of work", c.Cached, from, c.InFlight, c.Awaiting, c.Decode, c.Cost)
	if c.Adapter != "" {
		tier := map[string]string{
			picker.AdapterLoaded:   "has the adapter in a GPU slot (its engine runs it, or it is among the last max_lora adapters ILB sent there) and is not saturated",
			picker.AdapterBusy:     "has the adapter in a GPU slot but is saturated, and no more replicas hold it than its share of the cluster's requests asks for: it waits there rather than load it on another replica",
			picker.AdapterCached:   "ILB sent it the adapter before (its engine likely keeps it in CPU memory: a copy into a slot, not a load from disk), its slot free or not: no replica had it loaded with headroom",
			picker.AdapterSlot:     "a free adapter slot (or the adapter, but saturated, with more of its requests than the replicas holding it take): no replica had it loaded with headroom",
			picker.AdapterFull:     "every replica's adapter slots are taken by other adapters: it waits for one",
			picker.AdapterSlotWait: "has the adapter's requests, but its engine ran max_lora other adapters at its last scrape: they wait there for a slot; no replica ran the adapter with headroom, and the others would load it",
			picker.AdapterSpread:   "a free adapter slot, ranked with the replicas holding the adapter: a holder's engine is compute-bound (requests wait there for the batch, none for an adapter slot), and the adapter's share of the cluster's requests asks for more replicas than hold it or that holder's queue lasted, at every scrape over 750 ms, without shrinking",
		}[c.Adapter]
		p("", "adapter tier %s: %s; only replicas of that tier were candidates", c.Adapter, tier)
	}
	if ru := rd.RunnerUp; ru != nil {
		lost := map[string]string{
			picker.LostMoreWork:  fmt.Sprintf("%.0f more tokens of work", ru.Cost-c.Cost),
			picker.LostInFlight:  fmt.Sprintf("equal work, %d more requests in flight", ru.InFlight-c.InFlight),
			picker.LostSaturated: "equal work and requests in flight, its engine saturated",
			picker.LostRotation:  "equal in every term: later in this request's rotation (equal replicas share requests evenly)",
		}[rd.Lost]
		if lost == "" {
			lost = rd.Lost
		}
		p("runner-up", "%s: ~%d cached, %d in flight, %d queued, %.0f decode, cost %.0f; lost: %s", ru.Address, ru.Cached, ru.InFlight, ru.Awaiting, ru.Decode, ru.Cost, lost)
	}
	p("hosts", "%s (Envoy's override_host list: a retry takes the next)", strings.Join(rd.Hosts, ", "))
	switch rd.Served {
	case "chosen":
		p("", "Envoy served the chosen replica")
	case "other":
		p("WARNING", "Envoy served another replica than %s: a retry took the next host, or the chosen one had left Envoy's cluster", rd.Chosen)
	}
}

// printCandidates writes the candidate table: each cluster's weight,
// share and interval of slots, why it is excluded or saturated, and where
// the draw's slot fell (the cluster Envoy's draw names, which a redraw or
// steering then passed over).
func printCandidates(w io.Writer, r decision.Record) {
	if len(r.Candidates) == 0 {
		return
	}
	fmt.Fprintln(w, "candidates:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  CLUSTER\tWEIGHT\tSHARE\tINTERVAL\tNOTE")
	var begin uint64
	for _, c := range r.Candidates {
		interval := "-"
		var notes []string
		if c.Excluded != "" {
			notes = append(notes, "excluded: "+c.Excluded)
		}
		if c.Spill {
			note := "weight 0: never drawn; steering may send a request here when its engines are faster"
			if c.Cluster == r.Chosen {
				note = "weight 0, chosen by steering: its engines were faster"
			}
			notes = append(notes, note)
		}
		if c.Saturated {
			notes = append(notes, "saturated")
		}
		if c.Weight > 0 {
			end := begin + uint64(c.Weight)
			interval = fmt.Sprintf("[%d, %d)", begin, end)
			if r.Chosen != "" && r.Slot >= begin && r.Slot < end {
				note := fmt.Sprintf("<- slot %d falls here", r.Slot)
				if c.Cluster != r.Chosen {
					note += ", passed over (" + r.Reason + ")"
				}
				notes = append(notes, note)
			}
			begin = end
		}
		fmt.Fprintf(tw, "  %s\t%d\t%.1f%%\t%s\t%s\n", c.Cluster, c.Weight, 100*c.Share, interval, strings.Join(notes, "; "))
	}
	_ = tw.Flush()
}

func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}

// bookedText says how much of a request's estimate counts as demand, and
// why.
func bookedText(r decision.Record) string {
	g := r.Generated
	switch {
	case g == nil && (r.Status == 429 || r.Status == 503):
		return fmt.Sprintf("%.0f (refused for want of capacity: it counts as a typical served request of its stream, an ordinary one before any was served)", r.DemandBooked)
	case g == nil && r.DemandBooked >= r.TokenCost:
		return "all of it"
	case g == nil:
		return fmt.Sprintf("%.0f (a typical request's worth — an ordinary one, or what its stream's served requests cost: the rest counts only as an engine generates it)", r.DemandBooked)
	case g.Outcome == "unfollowed":
		return fmt.Sprintf("%.0f (a typical request's worth: extproc.max_followed_streams responses were followed already, so what the engine generated was not counted)", r.DemandBooked)
	}
	from := map[string]string{
		"usage":  "the engine's usage",
		"events": "one per streamed event",
		"bytes":  "a token per 4 bytes of response",
	}[g.From]
	how := map[string]string{
		"complete":  "the response ended",
		"confirmed": "the whole estimate was generated",
		"ended":     "the stream ended before the response did: the client went away",
	}[g.Outcome]
	return fmt.Sprintf("%.0f, as the engine generated it: %d tokens (%s); %s", r.DemandBooked, g.Tokens, from, how)
}

// waivedText says why the plan's shed that applied to a routed request
// was not enforced.
func waivedText(r decision.Record) string {
	why := "no cluster it may use confirmed the overload (their engines met the TTFT target, or had no queue), or ILB had no live engine state"
	if r.ShedWaivedFirstToken > 0 {
		why = fmt.Sprintf("its first token was predicted in %.2f s on %s (its wait there and its prompt's prefill), within the TTFT target", r.ShedWaivedFirstToken, orDash(r.Chosen))
		if s := r.ShedWaivedScale; s > 0 && s < 1 {
			why = fmt.Sprintf("its first token was predicted in %.2f s on %s (its wait there and its prompt's prefill, %.2f s, times %.2f: nine in ten of that cluster's first tokens came within that share of their prediction), within the TTFT target",
				r.ShedWaivedFirstToken, orDash(r.Chosen), r.ShedWaivedFirstToken/s, s)
		}
	}
	return fmt.Sprintf("the plan sheds %.0f%% of %s requests here, waived: %s", 100*r.ShedWaived, orDash(r.Priority), why)
}
