// Package loadgen drives OpenAI chat requests at Envoy listeners, as the
// clients of several sources would, and records where each one was
// served. It is the load of the demo and of the end-to-end tests.
package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ilbproject/ilb/header"
	"github.com/ilbproject/ilb/sim/engine"
)

// Target is the Envoy listener of one source.
type Target struct {
	Source string
	URL    string // e.g. http://127.0.0.1:10000
}

// Options shape the load. Every worker draws from its own PCG stream
// seeded by Seed, so a run's request mix is reproducible.
type Options struct {
	Targets []Target
	// Models are the model names requests ask for, drawn uniformly.
	Models []string
	// Duration bounds the run; Requests, when > 0, bounds it too.
	Duration time.Duration
	Requests int
	// Concurrency is the number of workers per target; default 4. Each
	// sends its next request when its last one is answered (closed loop).
	Concurrency int
	// Rate, when > 0, makes the load open-loop instead, as independent
	// clients are: requests arrive at each target as a Poisson process of
	// Rate per second, whatever the answers' latency (Concurrency is then
	// unused), and Run returns the requests the end of the run cut too,
	// with their error. MaxInFlight bounds the requests in flight per target
	// (default 1024): an arrival past it is not sent, and its Result has
	// ErrOverflow, so a saturated system under test cannot make the load
	// generator itself run out of memory.
	Rate        float64
	MaxInFlight int
	// SessionShare is the fraction of requests with an x-ilb-session key
	// drawn from Sessions keys; StreamShare the fraction with stream: true.
	SessionShare, StreamShare float64
	Sessions                  int
	// SessionContext, when > 0, is the size in bytes of a conversation
	// history every request of a session resends before its new message
	// (the same bytes for the whole session, different between sessions),
	// as a chat client does: what replica picking can find in an engine's
	// prefix cache. 0: a session's requests share only the key.
	SessionContext int
	// MaxTokens per request; default 8.
	MaxTokens int
	// Header adds headers to every request (e.g. x-ilb-debug).
	Header http.Header
	// Priority, when set, goes in x-ilb-priority.
	Priority string
	// Tenant, when set, goes in x-ilb-tenant (as an Envoy that sets it
	// from the client's identity would).
	Tenant string
	Seed   uint64
	Client *http.Client // nil: a client with a 30s timeout
	// handled, when set, is called after each open-loop arrival is sent
	// or dropped, with whether it was dropped (tests).
	handled func(dropped bool)
}

// Result is one request's outcome.
type Result struct {
	Source, Model, Session string
	Stream                 bool
	Status                 int
	// Cluster and Replica are where the request was really served: the
	// sim engine's x-ilb-engine-* headers, which sources without debug
	// strip, else the completion's system_fingerprint (the replica,
	// "cluster/index", as sim/fleet names it).
	Cluster, Replica string
	RequestID        string // x-request-id of the response
	// Reason is the x-ilb-reason of a response that is not a 200, and Body
	// the first 256 bytes of its body: why it failed, as the client saw it.
	Reason, Body string
	Events       int // SSE data events received
	Start        time.Time
	Latency      time.Duration
	// TTFT is the time to the first token as the client saw it: to the
	// first SSE data event of a stream, to the whole response otherwise;
	// 0 when none came.
	TTFT time.Duration
	Err  error
}

// ErrOverflow is the error of an open-loop arrival that was not sent:
// Options.MaxInFlight requests were in flight at its target.
var ErrOverflow = errors.New("loadgen: too many requests in flight, arrival dropped")

// Run sends requests until the duration or count is reached or ctx is
// done, and returns every result in completion order.
func Run(ctx context.Context, o Options) ([]Result, error) {
	if len(o.Targets) == 0 || len(o.Models) == 0 {
		return nil, errors.New("loadgen: want at least one target and one model")
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	if o.MaxTokens <= 0 {
		o.MaxTokens = 8
	}
	if o.Sessions <= 0 {
		o.Sessions = 16
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 30 * time.Second}
	}
	if o.Duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.Duration)
		defer cancel()
	}
	if o.Rate > 0 {
		return openLoop(ctx, o), nil
	}
	var (
		mu      sync.Mutex
		results []Result
		wg      sync.WaitGroup
	)
	budget := make(chan struct{}, max(o.Requests, 1))
	for range o.Requests {
		budget <- struct{}{}
	}
	for ti, t := range o.Targets {
		for w := range o.Concurrency {
			rng := rand.New(rand.NewPCG(o.Seed, uint64(ti*1000+w)))
			wg.Go(func() {
				for ctx.Err() == nil {
					if o.Requests > 0 {
						select {
						case <-budget:
						default:
							return
						}
					}
					r := one(ctx, o, t, rng)
					if ctx.Err() != nil && r.Err != nil {
						return // cut by the end of the run, not a failure
					}
					mu.Lock()
					results = append(results, r)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	return results, nil
}

// one sends a request and reads the whole response.
func one(ctx context.Context, o Options, t Target, rng *rand.Rand) Result {
	r := Result{Source: t.Source, Model: o.Models[rng.IntN(len(o.Models))], Stream: rng.Float64() < o.StreamShare}
	if rng.Float64() < o.SessionShare {
		r.Session = fmt.Sprintf("session-%d", rng.IntN(o.Sessions))
	}
	msgs := []map[string]string{{"role": "user", "content": fmt.Sprintf("Say something about the number %d.", rng.IntN(1000))}}
	if r.Session != "" && o.SessionContext > 0 {
		msgs = append([]map[string]string{{"role": "system", "content": sessionHistory(r.Session, o.SessionContext)}}, msgs...)
	}
	body, _ := json.Marshal(map[string]any{
		"model":      r.Model,
		"messages":   msgs,
		"stream":     r.Stream,
		"max_tokens": o.MaxTokens,
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(t.URL, "/")+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		r.Err = err
		return r
	}
	req.Header.Set("Content-Type", "application/json")
	for k, vs := range o.Header {
		req.Header[k] = vs
	}
	if r.Session != "" {
		req.Header.Set("x-ilb-session", r.Session)
	}
	if o.Tenant != "" {
		req.Header.Set(header.Tenant, o.Tenant)
	}
	if o.Priority != "" {
		req.Header.Set("x-ilb-priority", o.Priority)
	}
	start := time.Now()
	r.Start = start
	resp, err := o.Client.Do(req)
	if err != nil {
		r.Err = err
		return r
	}
	defer resp.Body.Close()
	r.Status = resp.StatusCode
	r.Cluster, r.Replica = resp.Header.Get(engine.HeaderCluster), resp.Header.Get(engine.HeaderReplica)
	r.RequestID = resp.Header.Get("x-request-id")
	var fingerprint string
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data:"); ok {
				if r.Events == 0 {
					r.TTFT = time.Since(start)
				}
				r.Events++
				if fingerprint == "" {
					fingerprint = systemFingerprint([]byte(data))
				}
			}
		}
		r.Err = sc.Err()
	} else {
		var b []byte
		b, r.Err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		fingerprint = systemFingerprint(b)
		if resp.StatusCode != http.StatusOK {
			r.Reason, r.Body = resp.Header.Get("x-ilb-reason"), string(b[:min(len(b), 256)])
		}
	}
	if r.Replica == "" {
		r.Cluster, r.Replica = fromFingerprint(fingerprint)
	}
	r.Latency = time.Since(start)
	if r.Events == 0 && r.Err == nil {
		r.TTFT = r.Latency
	}
	return r
}

// systemFingerprint is the system_fingerprint of a completion (or chunk)
// in JSON, "" when there is none.
func systemFingerprint(b []byte) string {
	var c struct {
		SystemFingerprint string `json:"system_fingerprint"`
	}
	if json.Unmarshal(bytes.TrimSpace(b), &c) != nil {
		return ""
	}
	return c.SystemFingerprint
}

// Served is where a simulated engine served a non-streamed completion:
// its x-ilb-engine-* headers (kept on sources with debug), else the
// body's system_fingerprint.
func Served(h http.Header, body []byte) (cluster, replica string) {
	if r := h.Get(engine.HeaderReplica); r != "" {
		return h.Get(engine.HeaderCluster), r
	}
	return fromFingerprint(systemFingerprint(body))
}

// fromFingerprint splits a replica name "cluster/index".
func fromFingerprint(replica string) (cluster, _ string) {
	if i := strings.LastIndexByte(replica, '/'); i > 0 {
		return replica[:i], replica
	}
	return "", replica
}

// sessionHistory is n bytes of text that stand for a session's
// conversation so far: the same for every request of the session.
func sessionHistory(session string, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "Earlier in %s, turn %d: the user asked a question and the assistant answered it at some length. ", session, i)
	}
	return b.String()[:n]
}
