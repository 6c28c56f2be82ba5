package round

import (
	"context"
	"errors"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/scheme"
)

func TestReadObjectsListsStatesAndMigrations(t *testing.T) {
	r := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithObjects(
		&migrationv1alpha1.StorageState{ObjectMeta: metav1.ObjectMeta{Name: "configmaps"}},
		&migrationv1alpha1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: "configmaps-1"}},
		&migrationv1alpha1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: "configmaps-2"}},
	).Build()
	objs, err := ReadObjects(t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs.States) != 1 || objs.States[0].Name != "configmaps" {
		t.Errorf("States = %v, want configmaps alone", objs.States)
	}
	if len(objs.Migrations) != 2 || objs.Migrations[0].Name != "configmaps-1" || objs.Migrations[1].Name != "configmaps-2" {
		t.Errorf("Migrations = %v, want configmaps-1 and configmaps-2", objs.Migrations)
	}
}

func TestReadObjectsFailsWithEitherList(t *testing.T) {
	refused := errors.New("refused")
	for _, failing := range []client.ObjectList{&migrationv1alpha1.StorageStateList{}, &migrationv1alpha1.StorageVersionMigrationList{}} {
		r := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithInterceptorFuncs(interceptor.Funcs{
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				if reflect.TypeOf(list) == reflect.TypeOf(failing) {
					return refused
				}
				return c.List(ctx, list, opts...)
			},
		}).Build()
		if _, err := ReadObjects(t.Context(), r); !errors.Is(err, refused) {
			t.Errorf("listing %T fails: ReadObjects error %v, want %v", failing, err, refused)
		}
	}
}
