package storagestate

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/scheme"
)

// A round finds each resource's migrations, in the order listed, however
// the list interleaves them; and a decision that appends to one
// resource's migrations leaves the next resource's alone, now that they
// share one slice.
func TestReadClusterGroupsMigrationsByResource(t *testing.T) {
	migration := func(name, group, resource string) client.Object {
		return &migrationv1alpha1.StorageVersionMigration{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: migrationv1alpha1.StorageVersionMigrationSpec{
				Resource: migrationv1alpha1.GroupVersionResource{Group: group, Version: "v1", Resource: resource},
			},
		}
	}
	// The fake lists by name: a, b, c, d, e.
	c := &Controller{Reader: fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		migration("a", "example.com", "widgets"),
		migration("b", "", "configmaps"),
		migration("c", "example.com", "widgets"),
		migration("d", "example.com", "gadgets"),
		migration("e", "", "configmaps"),
	).Build()}
	snap, err := c.readCluster(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	names := func(gr schema.GroupResource) []string {
		var out []string
		for _, m := range snap.migrations[gr] {
			out = append(out, m.Name)
		}
		return out
	}
	widgets := schema.GroupResource{Group: "example.com", Resource: "widgets"}
	configmaps := schema.GroupResource{Resource: "configmaps"}
	gadgets := schema.GroupResource{Group: "example.com", Resource: "gadgets"}
	for gr, want := range map[schema.GroupResource][]string{widgets: {"a", "c"}, configmaps: {"b", "e"}, gadgets: {"d"}} {
		if got := names(gr); !slices.Equal(got, want) {
			t.Errorf("migrations of %s: %v, want %v", gr, got, want)
		}
	}
	if len(snap.all) != 5 {
		t.Errorf("%d migrations in all, want 5", len(snap.all))
	}
	_ = append(snap.migrations[configmaps], migrationv1alpha1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: "appended"}})
	for gr, want := range map[schema.GroupResource][]string{widgets: {"a", "c"}, gadgets: {"d"}} {
		if got := names(gr); !slices.Equal(got, want) {
			t.Errorf("after an append to configmaps' migrations, those of %s: %v, want %v", gr, got, want)
		}
	}
}
