package intree

import (
	"context"
	"slices"
	"testing"

	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	storagemigrationv1beta1 "k8s.io/api/storagemigration/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestListReadsBothVersions(t *testing.T) {
	running := []metav1.Condition{{Type: string(storagemigrationv1.MigrationRunning), Status: metav1.ConditionTrue, Reason: "R"}}
	c := fake.NewClientBuilder().WithScheme(clientgoscheme.Scheme).WithObjects(
		&storagemigrationv1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: "ga"}, Spec: storagemigrationv1.StorageVersionMigrationSpec{Resource: metav1.GroupResource{Resource: "secrets"}}},
		&storagemigrationv1beta1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: "beta"},
			Spec:   storagemigrationv1beta1.StorageVersionMigrationSpec{Resource: metav1.GroupResource{Group: "example.com", Resource: "widgets"}},
			Status: storagemigrationv1beta1.StorageVersionMigrationStatus{Conditions: running, ResourceVersion: "42"}},
	).Build()
	for _, tc := range []struct {
		v1, beta bool
		want     []string
	}{{true, true, []string{"ga", "beta"}}, {true, false, []string{"ga"}}, {false, true, []string{"beta"}}, {false, false, nil}} {
		got, err := List(context.Background(), c, tc.v1, tc.beta)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, m := range got {
			names = append(names, m.Name)
		}
		if !slices.Equal(names, tc.want) {
			t.Errorf("List(v1=%v, beta=%v) = %v, want %v", tc.v1, tc.beta, names, tc.want)
		}
		for _, m := range got {
			if m.Name == "beta" && (!IsRunning(&m) || m.Spec.Resource.Resource != "widgets" || m.Status.ResourceVersion != "42") {
				t.Errorf("the v1beta1 migration read as %+v: its spec and status must carry over", m)
			}
		}
	}
}
