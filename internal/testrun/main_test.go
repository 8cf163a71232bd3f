package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestRelay: what go test -json says is printed as go test without -v
// prints it, and the skips are summarized by reason.
func TestRelay(t *testing.T) {
	stream := strings.Join([]string{
		`{"Action":"start","Package":"m/a"}`,
		`{"Action":"run","Package":"m/a","Test":"TestPass"}`,
		`{"Action":"output","Package":"m/a","Test":"TestPass","Output":"=== RUN   TestPass\n"}`,
		`{"Action":"output","Package":"m/a","Test":"TestPass","Output":"    a_test.go:9: chatter\n"}`,
		`{"Action":"pass","Package":"m/a","Test":"TestPass"}`,
		`{"Action":"output","Package":"m/a","Test":"TestFail","Output":"=== RUN   TestFail\n"}`,
		`{"Action":"output","Package":"m/a","Test":"TestFail","Output":"    a_test.go:12: got 1, want 2\n"}`,
		`{"Action":"output","Package":"m/a","Test":"TestFail","Output":"--- FAIL: TestFail (0.00s)\n"}`,
		`{"Action":"fail","Package":"m/a","Test":"TestFail"}`,
		`{"Action":"output","Package":"m/a","Test":"TestBrowser","Output":"=== RUN   TestBrowser\n"}`,
		`{"Action":"output","Package":"m/a","Test":"TestBrowser","Output":"    b_test.go:20: chromium is missing (apt-get install chromium)\n"}`,
		`{"Action":"output","Package":"m/a","Test":"TestBrowser","Output":"--- SKIP: TestBrowser (0.00s)\n"}`,
		`{"Action":"skip","Package":"m/a","Test":"TestBrowser"}`,
		`{"Action":"output","Package":"m/b","Test":"TestEtcd","Output":"    e_test.go:5: etcd is missing\n"}`,
		`{"Action":"skip","Package":"m/b","Test":"TestEtcd"}`,
		`{"Action":"output","Package":"m/b","Test":"TestEtcd2","Output":"    e_test.go:5: etcd is missing\n"}`,
		`{"Action":"skip","Package":"m/b","Test":"TestEtcd2"}`,
		`{"Action":"output","Package":"m/a","Output":"FAIL\n"}`,
		`{"Action":"output","Package":"m/a","Output":"FAIL\tm/a\t0.01s\n"}`,
		`{"Action":"output","Package":"m/b","Output":"PASS\n"}`,
		`{"Action":"output","Package":"m/b","Output":"ok  \tm/b\t0.02s\n"}`,
		`{"ImportPath":"m/c","Action":"build-output","Output":"c.go:1:1: expected 'package'\n"}`,
		`not json at all`,
	}, "\n")
	var out bytes.Buffer
	skips := relay(strings.NewReader(stream), &out)
	summarize(&out, skips)
	got := out.String()
	for _, want := range []string{
		"    a_test.go:12: got 1, want 2\n--- FAIL: TestFail (0.00s)\n",
		"FAIL\tm/a\t0.01s\n", "ok  \tm/b\t0.02s\n", "c.go:1:1: expected 'package'\n", "not json at all\n",
		"3 tests skipped:\n  2: etcd is missing\n     (m/b.TestEtcd, m/b.TestEtcd2)\n  1: chromium is missing (apt-get install chromium)\n     (m/a.TestBrowser)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"chatter", "=== RUN", "\nPASS\n"} {
		if strings.Contains(got, not) {
			t.Errorf("output has %q:\n%s", not, got)
		}
	}
}
