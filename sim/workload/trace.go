package workload

import (
	"cmp"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Row is one row of a trace.
type Row struct {
	// At is the arrival time since the earliest row of the trace, >= 0.
	At time.Duration
	// Input and Output are the prompt and generated lengths in tokens,
	// >= 0.
	Input, Output int
	// HashIDs optionally identify the prompt's blocks, prefix-chained (equal
	// IDs at position i mean equal prompts up to the end of block i), as in
	// the Mooncake traces where one ID covers 512 tokens.
	HashIDs []uint64
}

// ParseError is a bad line of a trace.
type ParseError struct {
	Line  int    // 1-based line number, counting the header
	Field string // column or key at fault; "" for the line as a whole
	Value string // the offending text, at most 64 bytes; may be ""
	Err   error
}

func (e *ParseError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "line %d", e.Line)
	if e.Field != "" {
		fmt.Fprintf(&b, ": field %s", e.Field)
	}
	if e.Value != "" {
		fmt.Fprintf(&b, ": value %q", e.Value)
	}
	fmt.Fprintf(&b, ": %v", e.Err)
	return b.String()
}

func (e *ParseError) Unwrap() error { return e.Err }

func truncate(s string) string {
	const limit = 64
	if len(s) > limit {
		return s[:limit] + "..."
	}
	return s
}

// Column names and timestamp layout of the Azure LLM inference traces.
const (
	azureTimestamp = "TIMESTAMP"
	azureContext   = "ContextTokens"
	azureGenerated = "GeneratedTokens"
	azureLayout    = "2006-01-02 15:04:05" // fractional seconds are accepted
)

// ReadAzureCSV reads an Azure LLM inference trace (Azure Public Dataset,
// "Azure LLM inference trace 2023", from Patel et al., Splitwise, ISCA 2024;
// CC-BY 4.0): a header naming the columns TIMESTAMP, ContextTokens and
// GeneratedTokens (in any order, matched case-insensitively; other columns
// are ignored), then one request per line, with timestamps like
// "2023-11-16 18:15:46.6805900" (UTC) and non-negative token counts.
//
// The rows come back sorted by time (stably), with At relative to the
// earliest row. A bad line gives a *[ParseError] naming the line number,
// the column and the value; every line must have as many fields as the
// header.
func ReadAzureCSV(r io.Reader) ([]Row, error) {
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, &ParseError{Line: 1, Err: errors.New("empty input: want the header TIMESTAMP,ContextTokens,GeneratedTokens")}
	}
	if err != nil {
		return nil, csvError(err)
	}
	cols := map[string]int{azureTimestamp: -1, azureContext: -1, azureGenerated: -1}
	for i, h := range header {
		for name := range cols {
			if strings.EqualFold(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")), name) {
				cols[name] = i
			}
		}
	}
	for _, name := range []string{azureTimestamp, azureContext, azureGenerated} {
		if cols[name] < 0 {
			return nil, &ParseError{Line: 1, Field: name, Err: fmt.Errorf("column missing from the header %q", strings.Join(header, ","))}
		}
	}
	var rows []Row
	var first time.Time
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, csvError(err)
		}
		line, _ := cr.FieldPos(0)
		ts := strings.TrimSpace(rec[cols[azureTimestamp]])
		at, err := time.Parse(azureLayout, ts)
		if err != nil {
			return nil, &ParseError{Line: line, Field: azureTimestamp, Value: truncate(ts), Err: errors.New(`not a time like "2023-11-16 18:15:46.6805900"`)}
		}
		if len(rows) == 0 {
			first = at
		}
		row := Row{At: at.Sub(first)}
		if row.Input, err = parseTokens(line, azureContext, rec[cols[azureContext]]); err != nil {
			return nil, err
		}
		if row.Output, err = parseTokens(line, azureGenerated, rec[cols[azureGenerated]]); err != nil {
			return nil, err
		}
		rows = append(rows, row)
	}
	return normalise(rows), nil
}

func csvError(err error) error {
	if pe, ok := errors.AsType[*csv.ParseError](err); ok {
		return &ParseError{Line: pe.Line, Err: pe.Err}
	}
	return fmt.Errorf("reading the trace: %w", err)
}

func parseTokens(line int, field, s string) (int, error) {
	s = strings.TrimSpace(s)
	n, err := strconv.Atoi(s)
	switch {
	case err != nil:
		return 0, &ParseError{Line: line, Field: field, Value: truncate(s), Err: errors.New("not an integer")}
	case n < 0:
		return 0, &ParseError{Line: line, Field: field, Value: s, Err: errors.New("negative token count")}
	}
	return n, nil
}

// normalise sorts rows by At (stably) and makes At relative to the earliest.
func normalise(rows []Row) []Row {
	if !slices.IsSortedFunc(rows, rowByAt) {
		slices.SortStableFunc(rows, rowByAt)
	}
	if len(rows) > 0 && rows[0].At != 0 {
		origin := rows[0].At
		for i := range rows {
			rows[i].At -= origin
		}
	}
	return rows
}

func rowByAt(a, b Row) int { return cmp.Compare(a.At, b.At) }

// LoadTrace reads the trace file at path by its extension: ".csv" with
// [ReadAzureCSV], ".jsonl" with [ReadJSONL]. Errors name the path.
func LoadTrace(path string) ([]Row, error) {
	var read func(io.Reader) ([]Row, error)
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".csv":
		read = ReadAzureCSV
	case ".jsonl":
		read = ReadJSONL
	default:
		return nil, fmt.Errorf("trace %s: unknown extension %q: want .csv or .jsonl", path, ext)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	rows, err := read(f)
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", path, err)
	}
	return rows, nil
}
