package kubetest

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestServerStartsStopsAndRestarts: a namespace written before a stop is
// read back after the restart (etcd kept it), through the admin token.
func TestServerStartsStopsAndRestarts(t *testing.T) {
	s := Start(t)
	ctx := context.Background()
	cs := s.Client()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kept"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "kept", metav1.GetOptions{}); err == nil {
		t.Fatal("a stopped API server answered")
	}
	s.Restart()
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "kept", metav1.GetOptions{}); err != nil {
		t.Fatalf("after restart: %v", err)
	}
}
