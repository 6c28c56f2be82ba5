package framework

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/svm-project/svm/test/controlplane"
)

// Flunders and Fischers are served by the sample aggregated API server
// through kube-apiserver's aggregator.
var (
	Flunders = schema.GroupVersionResource{Group: controlplane.SampleAPIGroup, Version: controlplane.SampleAPIVersion, Resource: "flunders"}
	Fischers = schema.GroupVersionResource{Group: controlplane.SampleAPIGroup, Version: controlplane.SampleAPIVersion, Resource: "fischers"}
)

// StartSampleAPIServer starts the sample aggregated API server and waits
// until kube-apiserver serves its group.
func (e *Env) StartSampleAPIServer(t testing.TB) {
	t.Helper()
	if err := e.CP.StartSampleAPIServer(Context(t, 2*time.Minute)); err != nil {
		t.Fatalf("start the sample aggregated API server: %v", err)
	}
}

// CreateFlunders creates n flunders in namespace (created if missing), each
// with its own labels and spec, through kube-apiserver's aggregator.
func (e *Env) CreateFlunders(t testing.TB, namespace string, n int) {
	t.Helper()
	e.CreateNamespace(t, namespace)
	ctx := Context(t, 5*time.Minute)
	for i := range n {
		f := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": Flunders.GroupVersion().String(), "kind": "Flunder",
			"metadata": map[string]any{
				"name":   fmt.Sprintf("flunder-%04d", i),
				"labels": map[string]any{"index": strconv.Itoa(i)},
			},
			"spec": map[string]any{"reference": fmt.Sprintf("flunder-%04d", (i+1)%n), "referenceType": "Flunder"},
		}}
		if _, err := e.Dynamic.Resource(Flunders).Namespace(namespace).Create(ctx, f, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create flunder %d: %v", i, err)
		}
	}
}

// SampleAPIEtcdPrefix is where the sample aggregated API server keeps the
// objects of resource: under its own prefix, then group and resource, as
// every server built on k8s.io/apiserver's generic storage does.
func SampleAPIEtcdPrefix(resource string) string {
	return controlplane.SampleAPIEtcdPrefix + "/" + controlplane.SampleAPIGroup + "/" + resource + "/"
}

// StripStorageVersionHashes makes the proxy remove storageVersionHash from
// the discovery documents of group, as an aggregated API server that does
// not report hashes would serve them. Everything else passes unchanged.
func (p *Proxy) StripStorageVersionHashes(group string) {
	prefix := "/apis/" + group + "/"
	p.ModifyResponse(func(r *http.Response) error {
		if r.Request.Method != http.MethodGet || !strings.HasPrefix(r.Request.URL.Path, prefix) ||
			strings.Count(strings.TrimPrefix(r.Request.URL.Path, prefix), "/") > 0 || r.StatusCode != http.StatusOK {
			return nil
		}
		if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
			return fmt.Errorf("discovery of %s answered in %q; the test can only rewrite JSON", r.Request.URL.Path, ct)
		}
		body, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return err
		}
		var list metav1.APIResourceList
		if err := json.Unmarshal(body, &list); err != nil {
			return fmt.Errorf("decode discovery of %s: %w", r.Request.URL.Path, err)
		}
		for i := range list.APIResources {
			list.APIResources[i].StorageVersionHash = ""
		}
		if body, err = json.Marshal(&list); err != nil {
			return err
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	})
}

// StoreFlundersAsV1beta1 rewrites every stored flunder in etcd in
// wardle.example.com/v1beta1, converting its spec, as an earlier release of
// the aggregated server that stored v1beta1 would have left it. The sample
// server reads both versions and writes v1alpha1, so the values then need a
// migration, and the API shows the same content before and after.
func (e *Env) StoreFlundersAsV1beta1(t testing.TB) {
	t.Helper()
	ctx := Context(t, time.Minute)
	for key, raw := range e.RawValues(t, SampleAPIEtcdPrefix("flunders")) {
		var obj map[string]any
		if err := json.Unmarshal(raw, &obj); err != nil {
			t.Fatalf("decode %s: %v", key, err)
		}
		obj["apiVersion"] = controlplane.SampleAPIGroup + "/v1beta1"
		if spec, ok := obj["spec"].(map[string]any); ok {
			if ref, ok := spec["reference"]; ok {
				spec["flunderReference"] = ref
				delete(spec, "reference")
			}
		}
		data, err := json.Marshal(obj)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Etcd.Put(ctx, key, string(data)); err != nil {
			t.Fatalf("write %s: %v", key, err)
		}
	}
}
