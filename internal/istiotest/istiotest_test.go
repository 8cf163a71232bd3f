package istiotest_test

import (
	"testing"

	"github.com/ilbproject/ilb/internal/istiotest"
	"github.com/ilbproject/ilb/internal/kubetest"
)

// TestIstiodStarts: istiod runs against the test API server and answers
// ready.
func TestIstiodStarts(t *testing.T) {
	k := kubetest.Start(t)
	i := istiotest.Start(t, k, istiotest.Options{})
	if i.XDSAddr() == "" {
		t.Fatal("no xDS address")
	}
}
