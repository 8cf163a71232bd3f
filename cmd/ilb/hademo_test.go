//go:build !serving

package main

import (
	"os"
	"strings"
	"testing"

	"github.com/ilbproject/ilb/ha/etcdtest"
)

// TestHADemo runs `ilb ha-demo` (three replicas on a three-member etcd,
// the leader stopped under load): it exits 0 only when no request failed,
// and reports the new leader and the table of requests by source. Skipped
// where etcd is not installed, unless ILB_REQUIRE_ETCD=1 (CI).
func TestHADemo(t *testing.T) {
	if _, err := etcdtest.Binary(); err != nil {
		if os.Getenv("ILB_REQUIRE_ETCD") != "1" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	out, errOut, err := runCmd(t, "ha-demo", "--config", "../../examples/demo/ilb.yaml", "--before", "2s", "--after", "3s")
	if err != nil {
		t.Fatalf("ha-demo: %v\n%s\n%s", err, out, errOut)
	}
	for _, want := range []string{"stopped at +", "led", "| edge-eu (fail closed) |", "| edge-us (fail open) |", "No request failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}
