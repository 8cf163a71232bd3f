package workload

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// maxJSONLine bounds one line of a JSONL trace (long hash_ids lists).
const maxJSONLine = 16 << 20

// jsonRow is one line of a JSONL trace; pointers tell missing from zero.
type jsonRow struct {
	Timestamp    *float64 `json:"timestamp"`
	InputLength  *int     `json:"input_length"`
	OutputLength *int     `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
}

// ReadJSONL reads a trace of JSON objects, one per line, as in the Mooncake
// traces:
//
//	{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 2916]}
//
// timestamp is in milliseconds (a JSON number, fractions allowed);
// input_length and output_length are non-negative integers; hash_ids is an
// optional array of non-negative integers. Blank lines are skipped.
//
// It is lenient on keys and strict on values: unknown keys are ignored, but
// a missing or null required key, a value of the wrong JSON type (such as
// "12" or 1.5 for a length), a negative length or a line that is not one
// JSON object gives a *[ParseError] naming the line and the key.
//
// The rows come back sorted by time (stably), with At relative to the
// earliest row.
func ReadJSONL(r io.Reader) ([]Row, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxJSONLine)
	var rows []Row
	var first float64
	line := 0
	for sc.Scan() {
		line++
		text := bytes.TrimSpace(sc.Bytes())
		if len(text) == 0 {
			continue
		}
		row, ms, err := parseJSONRow(line, text)
		if err != nil {
			return nil, err
		}
		if len(rows) == 0 {
			first = ms
		}
		row.At = time.Duration(math.Round((ms - first) * float64(time.Millisecond)))
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, &ParseError{Line: line + 1, Err: fmt.Errorf("line longer than %d bytes", maxJSONLine)}
		}
		return nil, fmt.Errorf("reading the trace: %w", err)
	}
	return normalise(rows), nil
}

// parseJSONRow decodes one non-blank line; it returns the row without At
// and the timestamp in milliseconds.
func parseJSONRow(line int, text []byte) (Row, float64, error) {
	var j jsonRow
	if err := json.Unmarshal(text, &j); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
			return Row{}, 0, &ParseError{Line: line, Field: te.Field, Err: fmt.Errorf("got %s, want %s", te.Value, jsonKind(te.Type.Kind().String()))}
		}
		return Row{}, 0, &ParseError{Line: line, Err: fmt.Errorf("not a JSON object: %w", err)}
	}
	switch {
	case j.Timestamp == nil:
		return Row{}, 0, &ParseError{Line: line, Field: "timestamp", Err: errors.New("missing")}
	case j.InputLength == nil:
		return Row{}, 0, &ParseError{Line: line, Field: "input_length", Err: errors.New("missing")}
	case j.OutputLength == nil:
		return Row{}, 0, &ParseError{Line: line, Field: "output_length", Err: errors.New("missing")}
	case math.Abs(*j.Timestamp) > float64(math.MaxInt64/int64(time.Millisecond)):
		return Row{}, 0, &ParseError{Line: line, Field: "timestamp", Value: fmt.Sprint(*j.Timestamp), Err: errors.New("out of range (milliseconds)")}
	case *j.InputLength < 0:
		return Row{}, 0, &ParseError{Line: line, Field: "input_length", Value: fmt.Sprint(*j.InputLength), Err: errors.New("negative token count")}
	case *j.OutputLength < 0:
		return Row{}, 0, &ParseError{Line: line, Field: "output_length", Value: fmt.Sprint(*j.OutputLength), Err: errors.New("negative token count")}
	}
	return Row{Input: *j.InputLength, Output: *j.OutputLength, HashIDs: j.HashIDs}, *j.Timestamp, nil
}

// jsonKind names the JSON type wanted for a Go kind.
func jsonKind(goKind string) string {
	switch goKind {
	case "int", "uint64":
		return "a non-negative integer"
	case "float64":
		return "a number"
	case "slice":
		return "an array of non-negative integers"
	}
	return goKind
}
