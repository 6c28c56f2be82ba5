package managedfields

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// documents reads each group-version's document straight from its path,
// and a group-version the API server does not serve (404) is, as one
// missing from the index, no schema and no error.
func TestDocumentsReadsOnlyTheirPaths(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.Path)
		mu.Unlock()
		http.NotFound(w, r)
	}))
	defer srv.Close()
	rc, err := rest.RESTClientFor(&rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{
		GroupVersion: &schema.GroupVersion{}, NegotiatedSerializer: scheme.Codecs.WithoutConversion(),
	}})
	if err != nil {
		t.Fatal(err)
	}
	d := documents{client: rc, gvs: []schema.GroupVersion{{Group: "example.com", Version: "v2"}, {Version: "v1"}}}
	for _, gvk := range []schema.GroupVersionKind{{Group: "example.com", Version: "v2", Kind: "Widget"}, {Version: "v1", Kind: "Pod"}} {
		vs, err := loadSchema(t.Context(), d, gvk)
		if vs != nil || err != nil {
			t.Errorf("loadSchema(%s) = %v, %v; want nil, nil", gvk, vs, err)
		}
	}
	if want := []string{"/openapi/v3/apis/example.com/v2", "/openapi/v3/api/v1"}; !slices.Equal(asked, want) {
		t.Errorf("asked %v, want %v", asked, want)
	}
}
