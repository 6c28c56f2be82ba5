package migration

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/svm-project/svm/internal/kubeclients"
	"github.com/svm-project/svm/internal/operation"
	"github.com/svm-project/svm/internal/scheme"
)

// A migration of a custom resource whose CRD has no version to move
// managedFields entries off (storedVersions list the storage version
// alone) asks the API server for nothing: no OpenAPI index, no document.
func TestRetiredFieldsNothingToRetireAsksNothing(t *testing.T) {
	var asked atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		t.Errorf("asked %s %s", r.Method, r.URL.Path)
		http.NotFound(w, r)
	}))
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL}
	clients, err := kubeclients.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := operation.New(cfg, clients, operation.Options{})
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	crd.Name = "widgets.example.com"
	crd.Spec.Group = "example.com"
	crd.Spec.Names = apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Kind: "Widget"}
	crd.Spec.Versions = []apiextensionsv1.CustomResourceDefinitionVersion{
		{Name: "v1", Served: true},
		{Name: "v2", Served: true, Storage: true},
	}
	crd.Status.StoredVersions = []string{"v2"}
	reader := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(crd).
		WithIndex(&apiextensionsv1.CustomResourceDefinition{}, "metadata.name", func(o client.Object) []string { return []string{o.GetName()} }).
		Build()
	marker := &CRDMarker{Reader: reader}
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v2", Resource: "widgets"}
	mf, err := marker.RetiredFields(t.Context(), gvr, ops, nil)
	if err != nil || mf != nil {
		t.Fatalf("RetiredFields = %v, %v; want nil, nil", mf, err)
	}
	if n := asked.Load(); n != 0 {
		t.Errorf("RetiredFields sent %d requests, want none", n)
	}
}
