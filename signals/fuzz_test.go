package signals

import (
	"bytes"
	"errors"
	"net"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// A discovery error names a few bad lines, each with a bounded excerpt,
// and counts the rest.
const (
	fuzzMaxLineErrors = 16
	fuzzMaxLineError  = 1024
)

// FuzzParseTargets feeds arbitrary bytes to the discovery file parser.
// Invariants: no panic; the same bytes give the same answer; every target
// is a host:port with a port, named once, on a content line of the file
// (blank lines and '#' comments are not content), draining when any of
// its lines says so; a problem names a content line ("line N: ..."), or
// counts the bad lines beyond the few named ("and N more bad lines"); no
// problem is long; and no content line is lost: each one gave a target, a
// named problem or is counted.
func FuzzParseTargets(f *testing.F) {
	for _, s := range []string{
		"",
		"\n\n# only a comment\n",
		"10.0.0.1:8000\n10.0.0.2:8000 draining\n",
		"a:1\n  b:2 draining # old\n#c:3\na:1 draining\n",
		"a:1\nnoport\nb:2 maybe\n",
		"[::1]:80\n[fe80::1%eth0]:8080 draining\n[::1]:80\n",
		"host:\n:80\n[::1]\n::1:80\na:b:c\n",
		"a:1\r\nb:2 draining\r\n",
		"a:1\tdraining\n\tb:2\t#\tx\n",
		"a:1 draining draining\na:1 DRAINING\n",
		"a:1\x00\nb:2\xff\n",
		"a:1", // a last line without a newline
	} {
		f.Add([]byte(s))
	}
	lineRE := regexp.MustCompile(`^line ([0-9]+): `)
	moreRE := regexp.MustCompile(`^and ([0-9]+) more bad lines?$`)
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := parseTargets(data)
		got2, err2 := parseTargets(data)
		if !reflect.DeepEqual(got, got2) || fuzzErrText(err) != fuzzErrText(err2) {
			t.Fatalf("not deterministic: %v %v, then %v %v", got, err, got2, err2)
		}
		// The content lines of the file, by number, as the format defines
		// them.
		content := map[int][]string{}
		for n, line := range bytes.Split(data, []byte("\n")) {
			l, _, _ := strings.Cut(string(line), "#")
			if fields := strings.Fields(l); len(fields) > 0 {
				content[n+1] = fields
			}
		}
		accounted := map[int]bool{}
		named, more := 0, 0
		for _, e := range fuzzErrLeaves(err) {
			msg := e.Error()
			if len(msg) > fuzzMaxLineError {
				t.Fatalf("a problem of %d bytes: %.200q...", len(msg), msg)
			}
			if m := moreRE.FindStringSubmatch(msg); m != nil {
				more, _ = strconv.Atoi(m[1])
				continue
			}
			m := lineRE.FindStringSubmatch(msg)
			if m == nil {
				t.Fatalf("problem %q names no line", msg)
			}
			n, _ := strconv.Atoi(m[1])
			if content[n] == nil {
				t.Fatalf("problem %q names line %d, which is not a content line", msg, n)
			}
			accounted[n] = true
			named++
		}
		if named > fuzzMaxLineErrors {
			t.Fatalf("%d problems named: want at most %d, the rest counted", named, fuzzMaxLineErrors)
		}
		seen := map[string]bool{}
		for _, tg := range got {
			if seen[tg.Address] {
				t.Fatalf("target %q listed twice: %+v", tg.Address, got)
			}
			seen[tg.Address] = true
			if _, port, err := net.SplitHostPort(tg.Address); err != nil || port == "" {
				t.Fatalf("target %q is not host:port", tg.Address)
			}
			draining, found := false, false
			for n, fields := range content {
				wellFormed := len(fields) == 1 || len(fields) == 2 && fields[1] == "draining"
				if fields[0] == tg.Address && wellFormed && !accounted[n] {
					found = true
					accounted[n] = true
					draining = draining || len(fields) == 2
				}
			}
			if !found {
				t.Fatalf("target %q is on no content line", tg.Address)
			}
			if draining != tg.Draining {
				t.Fatalf("target %q draining = %v; its lines say %v", tg.Address, tg.Draining, draining)
			}
		}
		lost := 0
		for n := range content {
			if !accounted[n] {
				lost++
			}
		}
		if lost != more {
			t.Fatalf("%d content lines gave neither a target nor a named problem, and the error counts %d more (targets %+v, error %v)", lost, more, got, err)
		}
	})
}

func fuzzErrText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// fuzzErrLeaves flattens joined errors.
func fuzzErrLeaves(err error) []error {
	if err == nil {
		return nil
	}
	var joined interface{ Unwrap() []error }
	if errors.As(err, &joined) {
		var out []error
		for _, e := range joined.Unwrap() {
			out = append(out, fuzzErrLeaves(e)...)
		}
		return out
	}
	return []error{err}
}
