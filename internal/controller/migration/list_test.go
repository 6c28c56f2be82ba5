package migration

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
)

func names(ms []migrationv1alpha1.StorageVersionMigration) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	slices.Sort(out)
	return out
}

// The list read from the informer's store is every migration in it, in a
// slice reused from call to call that keeps nothing of the last call.
func TestMigrationListReadsTheStoreIntoOneSlice(t *testing.T) {
	store := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
	for _, name := range []string{"a", "b", "c"} {
		if err := store.Add(&migrationv1alpha1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: name, UID: k8stypes.UID("uid-" + name)}}); err != nil {
			t.Fatal(err)
		}
	}
	l := migrationList{store: store}
	first, err := l.read(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(first); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("first read %v, want a, b, c", got)
	}
	if err := store.Delete(&migrationv1alpha1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: "b"}}); err != nil {
		t.Fatal(err)
	}
	second, err := l.read(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := names(second); !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("second read %v, want a, c", got)
	}
	if &first[0] != &second[0] {
		t.Error("the second read allocated a new slice; want the first one reused")
	}
	// The slot past the end no longer holds the deleted migration.
	if tail := second[:cap(second)][len(second):]; len(tail) == 0 || tail[0].Name != "" {
		t.Errorf("past the end: %+v, want a cleared slot", tail)
	}
}
