package migration

import (
	"testing"

	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/intree"
	"github.com/svm-project/svm/internal/scheme"
)

// The in-tree migration of a deleted svm migration is deleted by svm, the
// one of a live one is left.
func TestDeleteAbandoned(t *testing.T) {
	svms := func(name, forUID string) *storagemigrationv1.StorageVersionMigration {
		it := inTree(name, "widgets", false, "")
		it.Labels = map[string]string{intree.CreatedByLabel: intree.CreatedByExecutor}
		it.Annotations = map[string]string{intree.ForMigrationAnnotation: forUID}
		return &it
	}
	live := stopped("")
	cl := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(svms("widgets", string(live.UID)), svms("superseded", "uid-gone")).Build()
	r := &Reconciler{Client: cl, InTreeServed: true}
	var its storagemigrationv1.StorageVersionMigrationList
	if err := cl.List(t.Context(), &its); err != nil {
		t.Fatal(err)
	}
	r.deleteAbandoned(t.Context(), []migrationv1alpha1.StorageVersionMigration{*live}, its.Items)
	for name, want := range map[string]bool{"widgets": true, "superseded": false} {
		err := cl.Get(t.Context(), client.ObjectKey{Name: name}, &storagemigrationv1.StorageVersionMigration{})
		if exists := err == nil; exists != want {
			t.Errorf("in-tree migration %s exists: %v, want %v", name, exists, want)
		}
	}
}
