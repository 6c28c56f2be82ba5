package intree

import (
	"slices"
	"testing"

	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func child(name, forUID string, svms bool) storagemigrationv1.StorageVersionMigration {
	m := storagemigrationv1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-it-" + name)}}
	if svms {
		m.Labels = map[string]string{CreatedByLabel: CreatedByExecutor}
		m.Annotations = map[string]string{ForMigrationAnnotation: forUID}
	}
	return m
}

func TestAbandoned(t *testing.T) {
	deleting := child("deleting", "uid-gone", true)
	deleting.DeletionTimestamp = &metav1.Time{}
	ms := []storagemigrationv1.StorageVersionMigration{
		child("live", "uid-live", true),
		child("superseded", "uid-gone", true),
		child("users", "", false),
		deleting,
		child("probe", "", false),
	}
	var got []string
	for _, m := range Abandoned(ms, map[string]bool{"uid-live": true}) {
		got = append(got, m.Name)
	}
	if want := []string{"superseded"}; !slices.Equal(got, want) {
		t.Errorf("Abandoned = %v, want %v: svm's own whose svm migration is gone, not being deleted already", got, want)
	}
}

func TestDeleteToleratesGone(t *testing.T) {
	it := child("superseded", "uid-gone", true)
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(&it).Build()
	for range 2 { // the second finds it gone
		if err := Delete(t.Context(), c, &it); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Get(t.Context(), client.ObjectKey{Name: it.Name}, &storagemigrationv1.StorageVersionMigration{}); err == nil {
		t.Error("still there after Delete")
	}
}
