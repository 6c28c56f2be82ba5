package framework

import (
	"context"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// RecreateCRDOverOrphans deletes the CRD named name, which deletes its
// objects, creates it again with storage as its storage version, and puts
// orphans (raw etcd values, by key, read before with RawValues) back into
// etcd as they were: what a CRD whose finalizer was removed before its
// objects were deleted, created again, stands over. Its storedVersions
// then list storage alone.
func (e *Env) RecreateCRDOverOrphans(t testing.TB, name, storage string, orphans map[string][]byte) {
	t.Helper()
	ctx := Context(t, 2*time.Minute)
	old := &apiextensionsv1.CustomResourceDefinition{}
	if err := e.Client.Get(ctx, client.ObjectKey{Name: name}, old); err != nil {
		t.Fatal(err)
	}
	if err := e.Client.Delete(ctx, old); err != nil {
		t.Fatal(err)
	}
	Eventually(t, "customresourcedefinition "+name+" deleted", time.Minute, func(ctx context.Context) (bool, error) {
		err := e.Client.Get(ctx, client.ObjectKey{Name: name}, &apiextensionsv1.CustomResourceDefinition{})
		return apierrors.IsNotFound(err), nil
	})
	// Creation times are in seconds: the CRD is created in a later one
	// than its objects were.
	time.Sleep(1100 * time.Millisecond)
	again := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: old.Spec}
	for i := range again.Spec.Versions {
		again.Spec.Versions[i].Storage = again.Spec.Versions[i].Name == storage
	}
	if err := e.Client.Create(ctx, again); err != nil {
		t.Fatal(err)
	}
	e.WaitEstablished(t, name)
	for key, value := range orphans {
		if _, err := e.Etcd.Put(ctx, key, string(value)); err != nil {
			t.Fatal(err)
		}
	}
}
