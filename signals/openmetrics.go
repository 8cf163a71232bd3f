package signals

import (
	"bytes"
	"fmt"
)

// OpenMetrics 1.0 answers (Content-Type application/openmetrics-text) are
// normalised line by line to the Prometheus text format, then parsed by
// expfmt's text parser like any other answer. expfmt v0.73 does have an
// OpenMetrics 1.0 decoder, but it runs a generic ABNF parser on every line
// and its cost grows faster than the line: measured here, ~8 ms for an
// 80-byte sample line, 0.47 s for a 640-byte HELP line — a few long lines
// from one replica would take seconds of CPU that no request timeout
// bounds. The filtered text parse of a whole vLLM answer takes ~45 µs.
//
// The normalisation covers what differs in the lines ILB keeps (wanted
// families only; HELP and UNIT lines are dropped for both formats):
//   - "# EOF" must end the body (else it was truncated) and is dropped;
//   - a counter family is named without _total in its TYPE line: the line
//     is rewritten with the sample name, as the text format has it;
//   - type "unknown" is "untyped"; info, stateset and gaugehistogram TYPE
//     lines are dropped (their samples read as untyped);
//   - timestamps (seconds in OpenMetrics, milliseconds in text) and
//     exemplars ("# {labels} value") after the value are cut: ILB uses
//     neither.
//
// _created samples are not wanted, so the filter has dropped them already.

// openMetricsToText rewrites one kept OpenMetrics line (a TYPE line or a
// sample) as the text format would write it; nil drops the line. A line it
// cannot read is returned unchanged for the parser to report.
func openMetricsToText(line []byte) []byte {
	s := trimBlank(line)
	if s[0] == '#' {
		_, rest := token(trimBlank(s[1:])) // "TYPE"
		name, rest := token(trimBlank(rest))
		typ, _ := token(trimBlank(rest))
		switch string(typ) {
		case "counter":
			if bytes.HasSuffix(name, []byte("_total")) {
				return line
			}
			return fmt.Appendf(nil, "# TYPE %s_total counter\n", name)
		case "gauge", "histogram", "summary":
			return line
		case "unknown":
			return fmt.Appendf(nil, "# TYPE %s untyped\n", name)
		case "info", "stateset", "gaugehistogram":
			return nil
		}
		return line
	}
	name, rest := metricName(s)
	i := len(name)
	if len(rest) > 0 && rest[0] == '{' {
		end := labelsEnd(rest)
		if end < 0 {
			return line
		}
		i += end
	}
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	for i < len(s) && s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r' {
		i++
	}
	return s[:i]
}

// labelsEnd returns the index after the '}' closing the label set that
// rest starts with, honouring quoted values and their escapes, or -1.
func labelsEnd(rest []byte) int {
	inQuote := false
	for i := 1; i < len(rest); i++ {
		switch c := rest[i]; {
		case inQuote && c == '\\':
			i++
		case c == '"':
			inQuote = !inQuote
		case c == '\n':
			return -1
		case !inQuote && c == '}':
			return i + 1
		}
	}
	return -1
}
