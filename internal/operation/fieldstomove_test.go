package operation

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/rest"

	"github.com/svm-project/svm/internal/kubeclients"
)

// recorder is an API server that serves the OpenAPI v3 document of
// example.com/v2, 404 to everything else, and records every path asked.
type recorder struct {
	mu    sync.Mutex
	paths []string
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec.mu.Lock()
	rec.paths = append(rec.paths, r.URL.Path)
	rec.mu.Unlock()
	if r.URL.Path != "/openapi/v3/apis/example.com/v2" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"openapi": "3.0.0",
		"info":    map[string]any{"title": "Kubernetes", "version": "v1"},
		"paths":   map[string]any{},
		"components": map[string]any{"schemas": map[string]any{
			"com.example.v2.Widget": map[string]any{
				"type": "object",
				"properties": map[string]any{
					"spec": map[string]any{"type": "object", "properties": map[string]any{"size": map[string]any{"type": "string"}}},
				},
				"x-kubernetes-group-version-kind": []any{map[string]any{"group": "example.com", "version": "v2", "kind": "Widget"}},
			},
		}},
	})
}

func (rec *recorder) asked() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.paths)
}

func newRecordedOperations(t *testing.T) (*Operations, *recorder) {
	t.Helper()
	rec := &recorder{}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	cfg := &rest.Config{Host: srv.URL}
	clients, err := kubeclients.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := New(cfg, clients, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return ops, rec
}

func widgetCRD(stored ...string) *apiextensionsv1.CustomResourceDefinition {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	crd.Name = "widgets.example.com"
	crd.Spec.Group = "example.com"
	crd.Spec.Names = apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Kind: "Widget"}
	crd.Spec.Versions = []apiextensionsv1.CustomResourceDefinitionVersion{
		{Name: "v1", Served: true},
		{Name: "v2", Served: true, Storage: true},
	}
	crd.Status.StoredVersions = stored
	return crd
}

// A migration with no version to move entries off reads no OpenAPI
// document, nor anything else.
func TestFieldsToMoveNothingToRetireAsksNothing(t *testing.T) {
	ops, rec := newRecordedOperations(t)
	for _, stored := range [][]string{{"v2"}, nil} {
		mf, err := ops.FieldsToMove(context.Background(), widgetCRD(stored...), "")
		if err != nil || mf != nil {
			t.Fatalf("FieldsToMove with storedVersions %v = %v, %v; want nil, nil", stored, mf, err)
		}
	}
	if got := rec.asked(); len(got) != 0 {
		t.Errorf("FieldsToMove with nothing to retire asked %v; want no request", got)
	}
}

// A migration that moves entries off a version reads the document of the
// version kept straight from its path: not the index of every
// group-version's document first.
func TestFieldsToMoveReadsOnlyTheDocumentsItNeeds(t *testing.T) {
	ops, rec := newRecordedOperations(t)
	mf, err := ops.FieldsToMove(context.Background(), widgetCRD("v1", "v2"), "")
	if err != nil || mf == nil {
		t.Fatalf("FieldsToMove with storedVersions [v1 v2] = %v, %v; want a mover", mf, err)
	}
	if got, want := mf.Target, "example.com/v2"; got != want {
		t.Errorf("entries move to %s, want %s", got, want)
	}
	if got, want := rec.asked(), []string{"/openapi/v3/apis/example.com/v2"}; !slices.Equal(got, want) {
		t.Errorf("FieldsToMove asked %v, want %v", got, want)
	}
}
