package admin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"

	"github.com/ilbproject/ilb/decision"
	"github.com/ilbproject/ilb/internal/bound"
)

// serveDecisions answers GET /debug/decisions: the most recent records,
// or with follow the records as they complete (see Handler).
func serveDecisions(w http.ResponseWriter, r *http.Request, d Decisions, log *slog.Logger) {
	if d == nil {
		writeError(w, http.StatusNotFound, "this process keeps no decision log")
		return
	}
	q := r.URL.Query()
	n, err := intParam(q, "limit", 50, 10000)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	follow := false
	if s := q.Get("follow"); s != "" {
		if follow, err = strconv.ParseBool(s); err != nil {
			writeError(w, http.StatusBadRequest, "follow "+bound.Quote(s, bound.Excerpt)+" is not 1, true, 0 or false")
			return
		}
	}
	f := decision.Filter{Source: q.Get("source"), Model: q.Get("model"), Cluster: q.Get("cluster"), Reason: q.Get("reason")}
	if s := q.Get("before"); s != "" {
		if f.Before, err = strconv.ParseUint(s, 10, 64); err != nil || f.Before == 0 {
			writeError(w, http.StatusBadRequest, "before "+bound.Quote(s, bound.Excerpt)+" is not a record sequence number (the seq of the last record of a page)")
			return
		}
	}
	if !follow {
		writePage(w, r.URL, d.Find(f, n+1), n)
		return
	}
	// Subscribe before the headers go out: a client that has them misses
	// no record that completes afterwards. The subscription ends with the
	// request's context, which the server cancels when the client goes
	// away or this handler returns.
	sub := d.Subscribe(r.Context(), f, 0)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		log.WarnContext(r.Context(), "decision stream cannot flush", "err", err)
		return
	}
	enc := json.NewEncoder(w) // one line per value
	dropped := func(n uint64) error {
		if n == 0 {
			return nil
		}
		return enc.Encode(map[string]uint64{"dropped": n})
	}
	for d := range sub.Records() {
		// Records are dropped when the buffer is full, so after the ones
		// it holds: the first record delivered after them carries the
		// count, and the line goes just before it.
		if err := dropped(d.DroppedBefore); err != nil {
			return
		}
		if err := enc.Encode(d.Record); err != nil {
			return // the client went away
		}
		// With the buffer empty, drops since this record are at this
		// point: say so now rather than with the next record.
		if len(sub.Records()) == 0 {
			if err := dropped(sub.Dropped()); err != nil {
				return
			}
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// intParam reads the integer query parameter name in 1..most, def when
// absent; the error names the parameter.
func intParam(q url.Values, name string, def, most int) (int, error) {
	s := q.Get(name)
	if s == "" {
		return def, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 || v > most {
		return 0, fmt.Errorf("%s %s is not a number in 1..%d", name, bound.Quote(s, bound.Excerpt), most)
	}
	return v, nil
}

// MaxPageBytes bounds one page of /debug/decisions: records are cut at
// their bounds already, and the page stops before the record that would
// take it past this size.
const MaxPageBytes = 4 << 20

// writePage writes up to n of recs (found with one more, to know whether
// another page follows) as a JSON array within MaxPageBytes. When records
// remain, a Link header (rel="next") gives the URL of the next page: the
// same query with before= the last record's seq.
func writePage(w http.ResponseWriter, u *url.URL, recs []decision.Record, n int) {
	var buf bytes.Buffer
	buf.WriteString("[")
	shown := 0
	for i := range recs {
		if i == n {
			break
		}
		b, err := json.MarshalIndent(recs[i], "  ", "  ")
		if err != nil {
			writeError(w, http.StatusInternalServerError, "encode: "+err.Error())
			return
		}
		if shown > 0 && buf.Len()+len(b)+8 > MaxPageBytes {
			break
		}
		if shown > 0 {
			buf.WriteString(",")
		}
		buf.WriteString("\n  ")
		buf.Write(b)
		shown++
	}
	if shown > 0 {
		buf.WriteString("\n")
	}
	buf.WriteString("]\n")
	if shown < len(recs) {
		q := u.Query()
		q.Set("before", strconv.FormatUint(recs[shown-1].Seq, 10))
		next := url.URL{Path: u.Path, RawQuery: q.Encode()}
		w.Header().Set("Link", "<"+next.String()+`>; rel="next"`)
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(buf.Bytes())
}
