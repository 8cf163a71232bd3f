package signals

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/ilbproject/ilb/internal/bound"
)

// acceptHeader asks for the Prometheus text format only. Python's
// prometheus_client (vLLM, SGLang, TensorRT-LLM) answers OpenMetrics
// whenever the Accept header names it, whatever its q-value, and
// OpenMetrics brings nothing ILB reads; see openmetrics.go for what happens
// when a server answers it anyway.
const acceptHeader = "text/plain;version=0.0.4;q=1,*/*;q=0.1"

// parseExposition parses a metrics body with expfmt's text parser, keeping
// only the lines of the families in want (see filterLines). A body whose
// Content-Type is OpenMetrics is first normalised to the text format (see
// openmetrics.go). A parse error names the line of the original body.
func parseExposition(body []byte, h http.Header, want map[string]struct{}, scratch *parseScratch) (map[string]*dto.MetricFamily, error) {
	om := expfmt.ResponseFormat(h).FormatType() == expfmt.TypeOpenMetrics
	var eof bool
	scratch.text, scratch.lines, eof = filterLines(scratch.text[:0], scratch.lines[:0], body, want, om)
	if om && !eof {
		return nil, errors.New(`parse error: OpenMetrics body without "# EOF" (truncated)`)
	}
	dec := expfmt.NewDecoder(bytes.NewReader(scratch.text), expfmt.FmtText)
	fams := make(map[string]*dto.MetricFamily, len(want))
	for {
		f := &dto.MetricFamily{}
		err := dec.Decode(f)
		if errors.Is(err, io.EOF) {
			return fams, nil
		}
		if err != nil {
			return nil, originalLine(err, scratch.lines)
		}
		fams[f.GetName()] = f
	}
}

// parseScratch holds buffers reused across parses of one worker.
type parseScratch struct {
	text  []byte
	lines []int32
}

// originalLine rewrites a parse error's line number (counted in the
// filtered text) to the body's.
func originalLine(err error, lines []int32) error {
	var pe expfmt.ParseError
	if !errors.As(err, &pe) {
		// The parser's messages quote the engine's text: bounded, as they
		// are kept per replica and shown by /debug/signals.
		return errors.New("parse error: " + bound.String(err.Error(), bound.Message-64))
	}
	line := pe.Line
	switch {
	case line >= 1 && line <= len(lines):
		line = int(lines[line-1])
	case len(lines) > 0:
		line = int(lines[len(lines)-1])
	}
	return fmt.Errorf("parse error at line %d: %s", line, bound.String(pe.Msg, bound.Message-64))
}

// filterLines appends to dst the lines of body worth parsing and to lines
// their 1-based line numbers in body. It drops blank lines, comments
// (HELP and UNIT included: ILB reads no help text), and well-formed TYPE
// lines and samples of families not in want. Everything else — wanted
// lines and any line it cannot read as a well-formed comment or sample —
// is kept, so the parser still reports garbage at its line. The exposition
// formats are line based: no construct spans lines (HELP text escapes its
// newlines). With om, kept lines are normalised to the text format and eof
// reports whether the "# EOF" terminator was seen.
func filterLines(dst []byte, lines []int32, body []byte, want map[string]struct{}, om bool) ([]byte, []int32, bool) {
	n, eof := int32(0), false
	for len(body) > 0 {
		n++
		var line []byte
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i+1], body[i+1:]
		} else {
			line, body = body, nil
		}
		newline := line[len(line)-1] == '\n' // a last line without one may be truncated: keep it so
		switch keepLine(line, want) {
		case lineDrop:
			continue
		case lineEOF:
			eof = true
			continue
		case lineKeep:
			if om {
				if line = openMetricsToText(line); line == nil {
					continue
				}
			}
		}
		dst = append(dst, line...)
		if newline && line[len(line)-1] != '\n' {
			dst = append(dst, '\n')
		}
		lines = append(lines, n)
	}
	return dst, lines, eof
}

// What filterLines does with a line.
const (
	lineDrop    = iota
	lineKeep    // a wanted line
	lineGarbage // not a well-formed comment or sample: for the parser to report
	lineEOF     // the OpenMetrics terminator
)

// keepLine classifies one line (see filterLines).
func keepLine(line []byte, want map[string]struct{}) int {
	if len(bytes.TrimSpace(line)) == 0 {
		return lineDrop
	}
	s := trimBlank(line)
	if s[0] == '#' {
		kw, rest := token(trimBlank(s[1:]))
		switch string(kw) {
		case "TYPE":
			name, _ := token(trimBlank(rest))
			if _, ok := want[string(name)]; ok {
				return lineKeep
			}
			if !validMetricName(string(name)) {
				return lineGarbage
			}
		case "EOF":
			return lineEOF
		}
		return lineDrop
	}
	name, rest := metricName(s)
	if len(name) == 0 {
		return lineGarbage // not a legacy metric name (garbage, or a quoted UTF-8 name)
	}
	if _, ok := want[string(name)]; ok {
		return lineKeep
	}
	if !wellFormedSample(rest) {
		return lineGarbage
	}
	return lineDrop
}

// wellFormedSample reports whether rest (a sample line after its name) is
// an optional {label set} then a blank and a number. The label set ends at
// the line's last '}': a label value may hold '}', but nothing after the
// set can (an OpenMetrics exemplar's own set ends with a value too).
func wellFormedSample(rest []byte) bool {
	if len(rest) > 0 && rest[0] == '{' {
		end := bytes.LastIndexByte(rest, '}')
		if end < 0 {
			return false
		}
		rest = rest[end+1:]
	}
	if len(rest) == 0 || (rest[0] != ' ' && rest[0] != '\t') {
		return false
	}
	v, _ := token(trimBlank(rest))
	return isNumber(v)
}

// isNumber accepts the sample values of both formats: decimal and
// exponent notation, NaN and ±Inf. Anything else (hex floats included)
// counts as malformed, which only means the line goes to the parser.
func isNumber(v []byte) bool {
	w := bytes.TrimLeft(v, "+-")
	if bytes.EqualFold(w, []byte("nan")) || bytes.EqualFold(w, []byte("inf")) || bytes.EqualFold(w, []byte("infinity")) {
		return true
	}
	for _, c := range v {
		if (c < '0' || c > '9') && c != '.' && c != 'e' && c != 'E' && c != '+' && c != '-' {
			return false
		}
	}
	return len(v) > 0
}

// metricName splits a legacy metric name off the start of s; name is
// empty when s does not start with one followed by '{', a blank or the end.
func metricName(s []byte) (name, rest []byte) {
	i := 0
	for i < len(s) {
		if !nameChar(s[i], i == 0) {
			break
		}
		i++
	}
	if i == 0 || (i < len(s) && s[i] != '{' && s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r') {
		return nil, s
	}
	return s[:i], s[i:]
}

// token splits s at its first blank.
func token(s []byte) (tok, rest []byte) {
	for i, c := range s {
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			return s[:i], s[i:]
		}
	}
	return s, nil
}

func trimBlank(s []byte) []byte {
	return bytes.TrimLeft(s, " \t")
}
