package etcdtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/ilbproject/ilb/ha/etcdtest"
)

// TestQuorum: a 3-member cluster serves with one member down, refuses a
// write with two down, and serves again, with its data, once they are
// back.
func TestQuorum(t *testing.T) {
	c := etcdtest.Start(t, 3)
	cli := c.Client()
	// put retries within its time: a write in flight on a member that is
	// killed fails (Unavailable), and the client does not replay writes.
	put := func(key, val string, within time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		for {
			_, err := cli.Put(ctx, key, val)
			if err == nil || ctx.Err() != nil {
				return err
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	get := func(key string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, key)
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		if len(resp.Kvs) == 0 {
			return ""
		}
		return string(resp.Kvs[0].Value)
	}
	if err := put("a", "1", 30*time.Second); err != nil {
		t.Fatalf("put on a healthy cluster: %v", err)
	}

	c.Kill(0)
	if err := put("b", "2", 30*time.Second); err != nil {
		t.Fatalf("put with one member of three down: %v", err)
	}

	c.Kill(1)
	// Without a quorum a write cannot commit: it waits until its context
	// ends (a short one: this only checks the write did not happen).
	if err := put("c", "3", 2*time.Second); err == nil {
		t.Fatal("a write committed with two members of three down")
	}

	c.Restart(0)
	c.Restart(1)
	c.WaitHealthy()
	if got := get("a") + get("b"); got != "12" {
		t.Fatalf("after the restart a+b = %q, want 12: the members lost their data", got)
	}
	if err := put("d", "4", 30*time.Second); err != nil {
		t.Fatalf("put after the quorum returned: %v", err)
	}
}

// TestBinary: the binary the tests run is found, or the error says how to
// install one.
func TestBinary(t *testing.T) {
	t.Setenv("ILB_ETCD", "/nonexistent/etcd")
	if p, err := etcdtest.Binary(); err != nil || p != "/nonexistent/etcd" {
		t.Fatalf("Binary() = %q, %v: want ILB_ETCD", p, err)
	}
}
