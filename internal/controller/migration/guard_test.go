package migration

import (
	"context"
	"testing"

	apiserverinternalv1alpha1 "k8s.io/api/apiserverinternal/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/svm-project/svm/internal/resources"
)

// TestGuardReadsStorageVersionsWithoutTheRESTMapper: the guard reads the
// StorageVersion object of a resource with the typed client, finds it by
// name, and takes an API that is not served (404) for none, as discovery
// alone.
func TestGuardReadsStorageVersionsWithoutTheRESTMapper(t *testing.T) {
	gr := schema.GroupResource{Group: "apps", Resource: "deployments"}
	other := schema.GroupResource{Group: "apps", Resource: "daemonsets"}
	ctx := context.Background()

	objects := []runtime.Object{
		&apiserverinternalv1alpha1.StorageVersion{ObjectMeta: metav1.ObjectMeta{Name: resources.StorageVersionName(other)}},
		&apiserverinternalv1alpha1.StorageVersion{ObjectMeta: metav1.ObjectMeta{Name: resources.StorageVersionName(gr)}},
	}
	g := APIStorageGuard{StorageVersions: fake.NewClientset(objects...).InternalV1alpha1()}
	sv, err := g.storageVersion(ctx, gr)
	if err != nil || sv == nil || sv.Name != resources.StorageVersionName(gr) {
		t.Fatalf("served: got %v, %v; want %s", sv, err, resources.StorageVersionName(gr))
	}

	notServed := fake.NewClientset()
	notServed.PrependReactor("list", "storageversions", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(schema.GroupResource{Group: "internal.apiserver.k8s.io", Resource: "storageversions"}, "")
	})
	g = APIStorageGuard{StorageVersions: notServed.InternalV1alpha1()}
	if sv, err := g.storageVersion(ctx, gr); sv != nil || err != nil {
		t.Fatalf("not served: got %v, %v; want none and no error", sv, err)
	}

	failing := fake.NewClientset()
	failing.PrependReactor("list", "storageversions", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewServiceUnavailable("down")
	})
	g = APIStorageGuard{StorageVersions: failing.InternalV1alpha1()}
	if _, err := g.storageVersion(ctx, gr); err == nil {
		t.Fatal("a failed read: no error")
	}

	if sv, err := (APIStorageGuard{}).storageVersion(ctx, gr); sv != nil || err != nil {
		t.Fatalf("no client: got %v, %v", sv, err)
	}
}
