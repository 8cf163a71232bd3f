package signals

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// UserAgent is the User-Agent header of every probe and scrape.
const UserAgent = "ilb-signals"

// scrapeResult is the outcome of one scrape of one replica.
type scrapeResult struct {
	// alive: the health probe answered 2xx.
	alive bool
	// silent: the health probe failed without an answer (a timeout, no
	// route); false when it failed with one (refused, reset, an HTTP
	// status). Meaningful only when !alive.
	silent bool
	// x is what the mapping read from the metrics; nil when they could
	// not be fetched or parsed (err says why).
	x        *extraction
	err      string
	result   string // resultOK, resultProbeFailed or resultMetricsError
	duration time.Duration
	// slotWait is how long the scrape waited for a worker slot (the
	// monitor's clock); the requests' own timeouts start after it.
	slotWait time.Duration
}

// scrapeBuffers are a worker's reusable buffers.
type scrapeBuffers struct {
	body    bytes.Buffer
	scratch parseScratch
}

// scrape probes addr's health and, when alive, reads and parses its
// metrics. Each request gets its own Signals.Timeout. It runs on a worker
// goroutine and touches no loop state.
func (m *Monitor) scrape(ctx context.Context, cl *cluster, addr string) scrapeResult {
	start := time.Now() // real time: the duration metric measures the network
	res := m.scrapeOnce(ctx, cl, addr)
	res.duration = time.Since(start)
	return res
}

// metricsAddr is where a replica at addr (host:port) serves its metrics:
// addr itself, or its host on port when port is set (Triton's 8002).
func metricsAddr(addr string, port int) string {
	if port == 0 {
		return addr
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr // discovery gives host:port; a bad one fails the fetch
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

func (m *Monitor) scrapeOnce(ctx context.Context, cl *cluster, addr string) scrapeResult {
	if err := m.probe(ctx, "http://"+addr+cl.cfg.Metrics.HealthPath); err != nil {
		return scrapeResult{err: err.Error(), silent: isSilent(err), result: resultProbeFailed}
	}
	b, _ := m.buffers.Get().(*scrapeBuffers)
	if b == nil {
		b = &scrapeBuffers{}
	}
	defer m.buffers.Put(b)
	h, err := m.fetch(ctx, "http://"+metricsAddr(addr, cl.cfg.Metrics.Port)+cl.cfg.Metrics.Path, &b.body)
	if err != nil {
		return scrapeResult{alive: true, err: err.Error(), result: resultMetricsError}
	}
	fams, err := parseExposition(b.body.Bytes(), h, cl.mapping.want, &b.scratch)
	if err != nil {
		return scrapeResult{alive: true, err: err.Error(), result: resultMetricsError}
	}
	x := cl.mapping.extract(fams)
	res := scrapeResult{alive: true, x: &x, result: resultOK}
	if !x.good {
		res.result = resultMetricsError
	}
	return res
}

// probe GETs a health URL on the probe client: nil for a 2xx answer,
// else a *probeError that says whether the failure was silent.
func (m *Monitor) probe(ctx context.Context, u string) error {
	ctx, cancel := context.WithTimeout(ctx, m.sig.Timeout.Std())
	defer cancel()
	resp, err := m.get(ctx, m.probeClient, u, "")
	if err != nil {
		return m.fail(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // reuse the connection
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return definite(fmt.Sprintf("HTTP %d", resp.StatusCode))
	}
	return nil
}

// fetch GETs a metrics URL into buf, refusing a body over MaxBodyBytes
// without reading more than one byte past it.
func (m *Monitor) fetch(ctx context.Context, u string, buf *bytes.Buffer) (http.Header, error) {
	ctx, cancel := context.WithTimeout(ctx, m.sig.Timeout.Std())
	defer cancel()
	resp, err := m.get(ctx, m.client, u, acceptHeader)
	if err != nil {
		return nil, m.fail(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, definite(fmt.Sprintf("HTTP %d", resp.StatusCode))
	}
	limit := int64(m.sig.MaxBodyBytes)
	if resp.ContentLength > limit {
		return nil, fmt.Errorf("metrics body over %d bytes (Content-Length %d)", limit, resp.ContentLength)
	}
	buf.Reset()
	if _, err := buf.ReadFrom(io.LimitReader(resp.Body, limit+1)); err != nil {
		return nil, &probeError{msg: "reading the body: " + m.describe(err).Error(), silent: classifyTransport(err)}
	}
	if int64(buf.Len()) > limit {
		return nil, fmt.Errorf("metrics body over %d bytes", limit)
	}
	return resp.Header, nil
}

func (m *Monitor) get(ctx context.Context, client *http.Client, u, accept string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, http.NoBody)
	if err != nil {
		return nil, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	req.Header.Set("User-Agent", UserAgent)
	return client.Do(req)
}

// fail turns a transport error into a *probeError: the short text of
// describe, classified by classifyTransport.
func (m *Monitor) fail(err error) error {
	return &probeError{msg: m.describe(err).Error(), silent: classifyTransport(err)}
}

// describe shortens transport errors for reasons: the URL is dropped (the
// replica is known) and a deadline says which.
func (m *Monitor) describe(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("timeout after %s", m.sig.Timeout)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
