package framework

import (
	"fmt"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// CreateWidgets creates n widgets spread over the given namespaces (created
// if missing), each with distinct spec, labels, annotations and data so that
// any change to content is visible. It uses a few parallel writers.
func (e *Env) CreateWidgets(t testing.TB, version string, namespaces []string, n int) {
	t.Helper()
	ctx := Context(t, 10*time.Minute)
	for _, ns := range namespaces {
		e.CreateNamespace(t, ns)
	}
	gvr := schema.GroupVersionResource{Group: Widgets.Group, Version: version, Resource: Widgets.Resource}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range n {
		ns := namespaces[i%len(namespaces)]
		g.Go(func() error {
			_, err := e.Dynamic.Resource(gvr).Namespace(ns).Create(ctx, Widget(version, fmt.Sprintf("widget-%05d", i), i), metav1.CreateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("create widgets: %v", err)
	}
}

// Widget returns widget number i, named name, in the given API version.
func Widget(version, name string, i int) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": Widgets.Group + "/" + version,
		"kind":       "Widget",
		"metadata": map[string]any{
			"name":        name,
			"labels":      map[string]any{"index": fmt.Sprint(i), "parity": []string{"even", "odd"}[i%2]},
			"annotations": map[string]any{"example.com/note": fmt.Sprintf("widget number %d", i)},
		},
		"spec": map[string]any{"size": int64(i), "color": []any{"red", "green", "blue"}[i%3], "tags": []any{"a", fmt.Sprint(i)}},
		"data": map[string]any{"payload": fmt.Sprintf("%0128d", i)},
	}}
}

// CreateNamespace creates a namespace unless it exists.
func (e *Env) CreateNamespace(t testing.TB, name string) {
	t.Helper()
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name}}}
	_, err := e.Dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(Context(t, time.Minute), ns, metav1.CreateOptions{})
	if err != nil && !IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// List lists every object of gvr in all namespaces.
func (e *Env) List(t testing.TB, gvr schema.GroupVersionResource) []unstructured.Unstructured {
	t.Helper()
	list, err := e.Dynamic.Resource(gvr).List(Context(t, 5*time.Minute), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list %s: %v", gvr, err)
	}
	return list.Items
}
