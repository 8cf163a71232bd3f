package kubetest

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// InferencePoolCRD is the CRD of the Gateway API Inference Extension's
// InferencePool, v1, cut to the fields ILB reads.
//
//go:embed inferencepool-crd.yaml
var InferencePoolCRD []byte

// InstallInferencePool applies InferencePoolCRD and waits until it is
// served.
func (s *Server) InstallInferencePool(t testing.TB) {
	t.Helper()
	if _, err := s.Apply(context.Background(), InferencePoolCRD); err != nil {
		t.Fatal(err)
	}
}

// Namespace creates a namespace.
func (s *Server) Namespace(t testing.TB, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := s.Client().CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// ApplyPool writes InferencePool ns/name selecting the Pods labelled
// app=<app>, on ports.
func (s *Server) ApplyPool(t testing.TB, ns, name, app string, ports ...int) {
	t.Helper()
	ps := make([]string, len(ports))
	for i, p := range ports {
		ps[i] = fmt.Sprintf("{number: %d}", p)
	}
	doc := fmt.Sprintf(`apiVersion: inference.networking.k8s.io/v1
kind: InferencePool
metadata: {name: %s, namespace: %s}
spec:
  selector: {matchLabels: {app: %s}}
  targetPorts: [%s]
  endpointPickerRef: {name: ilb, port: {number: 18001}}
`, name, ns, app, strings.Join(ps, ", "))
	if _, err := s.Apply(context.Background(), []byte(doc)); err != nil {
		t.Fatal(err)
	}
}

// RunningPod creates Pod ns/name labelled app=<app>, bound to a node (so
// that deleting it is graceful: it terminates until force-deleted; no
// kubelet runs), and sets its status to Running with ip and the Ready
// condition ready.
func RunningPod(t testing.TB, cs kubernetes.Interface, ns, name, app, ip string, ready bool) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "engine", Image: "vllm/vllm-openai"}}},
	}
	p, err := cs.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return SetPod(t, cs, p, ip, ready)
}

// SetPod sets Pod p's status to Running with ip and the Ready condition
// ready.
func SetPod(t testing.TB, cs kubernetes.Interface, p *corev1.Pod, ip string, ready bool) *corev1.Pod {
	t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status = corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}},
	}
	p, err := cs.CoreV1().Pods(p.Namespace).UpdateStatus(context.Background(), p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Service creates headless Service ns/name with one port "http" 8000 (no
// selector: the tests write its EndpointSlices).
func (s *Server) Service(t testing.TB, ns, name string) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "http", Port: 8000}}},
	}
	if _, err := s.Client().CoreV1().Services(ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
