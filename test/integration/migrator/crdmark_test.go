package migrator_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/controller/migration"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// listCounter counts the lists a reader sends, by the list's type.
type listCounter struct {
	client.Reader
	mu    sync.Mutex
	lists map[string]int
}

func (c *listCounter) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c.mu.Lock()
	c.lists[fmt.Sprintf("%T", list)]++
	c.mu.Unlock()
	return c.Reader.List(ctx, list, opts...)
}

func (c *listCounter) count(list client.ObjectList) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lists[fmt.Sprintf("%T", list)]
}

// TestStorageMigratingFromTheGuardsRead: the migration controller marks a
// CRD StorageMigrating from the CRD its storage guard has just read,
// conditional on that read's resourceVersion, without reading it again,
// and what the trigger recorded is taken from the StorageState read with
// it. A CRD written since that read (the mark itself here) makes the
// write conflict: the CRD is read again and the condition set all the
// same, never dropped. The guard's read after the run reads the CRD
// alone.
func TestStorageMigratingFromTheGuardsRead(t *testing.T) {
	env := framework.Shared(t, controlplane.Options{})
	r := env.NewResource(t)
	gr := r.GVR("v1").GroupResource()
	ctx := framework.Context(t, 2*time.Minute)
	crds, err := apiextensionsclient.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	reads := &listCounter{Reader: env.Client, lists: map[string]int{}}
	guard := migration.APIStorageGuard{Reader: reads}
	marker := &migration.CRDMarker{Reader: reads, CRDs: crds.ApiextensionsV1().CustomResourceDefinitions()}

	read, err := guard.Read(ctx, gr)
	if err != nil || read.CRD == nil {
		t.Fatalf("guard read: CRD %v, %v", read.CRD, err)
	}
	_ = guard.StoredSince(ctx, gr, read)
	if n := reads.count(&apiextensionsv1.CustomResourceDefinitionList{}); n != 1 {
		t.Errorf("the guard read the CRD %d times, want 1", n)
	}
	if n := reads.count(&migrationv1alpha1.StorageStateList{}); n != 1 {
		t.Errorf("the guard and StoredSince read the StorageState %d times, want 1", n)
	}

	var first migration.CRDMark
	if err := marker.Mark(ctx, &first, gr, "first", 0, read.CRD); err != nil {
		t.Fatal(err)
	}
	if n := reads.count(&apiextensionsv1.CustomResourceDefinitionList{}); n != 1 {
		t.Errorf("marking from the guard's read read the CRD again (%d reads, want 1)", n)
	}
	assertMarked(t, env, r.CRDName(), "svm migration first is running")

	// read.CRD is stale now: the mark above wrote the CRD.
	var second migration.CRDMark
	if err := marker.Mark(ctx, &second, gr, "second", 0, read.CRD); err != nil {
		t.Fatalf("marking from a stale read: %v", err)
	}
	if n := reads.count(&apiextensionsv1.CustomResourceDefinitionList{}); n != 2 {
		t.Errorf("after a conflict the CRD was read %d times in all, want 2", n)
	}
	assertMarked(t, env, r.CRDName(), "svm migration second is running")

	// After the run, the guard reads the CRD again, but not the
	// StorageState: what the run needed of it was read before.
	after, err := guard.ReadAfter(ctx, gr)
	if err != nil || after.CRD == nil || after.CRD.ResourceVersion == read.CRD.ResourceVersion {
		t.Fatalf("guard read after the run: CRD %v (resourceVersion before the marks %s), %v", after.CRD, read.CRD.ResourceVersion, err)
	}
	if n := reads.count(&apiextensionsv1.CustomResourceDefinitionList{}); n != 3 {
		t.Errorf("the CRD was read %d times in all, want 3", n)
	}
	if n := reads.count(&migrationv1alpha1.StorageStateList{}); n != 1 {
		t.Errorf("the StorageState was read %d times in all, want 1: ReadAfter read it", n)
	}
}

// assertMarked fails unless the CRD name is StorageMigrating=True with
// message.
func assertMarked(t *testing.T, env *framework.Env, name, message string) {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(framework.Context(t, time.Minute), client.ObjectKey{Name: name}, crd); err != nil {
		t.Fatal(err)
	}
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.StorageMigrating {
			if c.Status != apiextensionsv1.ConditionTrue || c.Message != message {
				t.Errorf("StorageMigrating %s %q, want True %q", c.Status, c.Message, message)
			}
			return
		}
	}
	t.Errorf("no StorageMigrating condition on %s, want True %q", name, message)
}
