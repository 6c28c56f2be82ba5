package round

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"

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

// pagedReader serves lists of StorageStates two at a time, with continue
// tokens, each carrying managedFields, and records the limits asked for.
type pagedReader struct {
	client.Reader
	states []string
	limits []int64
}

func (p *pagedReader) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := (&client.ListOptions{}).ApplyOptions(opts)
	p.limits = append(p.limits, o.Limit)
	switch l := list.(type) {
	case *migrationv1alpha1.StorageStateList:
		start := 0
		if o.Continue != "" {
			start, _ = strconv.Atoi(o.Continue)
		}
		end := min(start+2, len(p.states))
		l.Items = nil
		for _, name := range p.states[start:end] {
			l.Items = append(l.Items, migrationv1alpha1.StorageState{ObjectMeta: metav1.ObjectMeta{
				Name: name, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "svm"}},
			}})
		}
		l.Continue = ""
		if end < len(p.states) {
			l.Continue = strconv.Itoa(end)
		}
	case *migrationv1alpha1.StorageVersionMigrationList:
		l.Items, l.Continue = nil, ""
	}
	return nil
}

// TestReadObjectsReadsEveryPage: the lists are read a page at a time to
// the last, and what is kept has no managedFields.
func TestReadObjectsReadsEveryPage(t *testing.T) {
	r := &pagedReader{states: []string{"a", "b", "c", "d", "e"}}
	objs, err := ReadObjects(t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range objs.States {
		names = append(names, s.Name)
		if s.ManagedFields != nil {
			t.Errorf("%s kept its managedFields", s.Name)
		}
	}
	if !slices.Equal(names, r.states) {
		t.Errorf("states read %v, want %v", names, r.states)
	}
	// Three pages of states, one of migrations, each asked with a limit.
	if len(r.limits) != 4 || slices.Contains(r.limits, 0) {
		t.Errorf("limits asked %v, want 4 lists, each with a limit", r.limits)
	}
}

// TestSlimKeepsWhatARoundReads: a slim CRD keeps its metadata (but
// managedFields), group, names, scope, each version's flags and its
// status, and drops the schemas and the rest.
func TestSlimKeepsWhatARoundReads(t *testing.T) {
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com", Generation: 3, ResourceVersion: "7",
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Kind: "Widget"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Deprecated: true, Schema: &apiextensionsv1.CustomResourceValidation{}},
				{Name: "v2", Served: true, Storage: true, Schema: &apiextensionsv1.CustomResourceValidation{},
					Subresources: &apiextensionsv1.CustomResourceSubresources{}},
			},
			Conversion: &apiextensionsv1.CustomResourceConversion{Strategy: apiextensionsv1.NoneConverter},
		},
		Status: apiextensionsv1.CustomResourceDefinitionStatus{StoredVersions: []string{"v1", "v2"}},
	}
	want := crd.DeepCopy()
	want.ManagedFields = nil
	want.Spec.Conversion = nil
	for i := range want.Spec.Versions {
		want.Spec.Versions[i].Schema, want.Spec.Versions[i].Subresources = nil, nil
	}
	if got := Slim(crd); !equality.Semantic.DeepEqual(&got, want) {
		t.Errorf("Slim =\n%+v\nwant\n%+v", got, want)
	}
	if crd.ManagedFields == nil || crd.Spec.Versions[0].Schema == nil {
		t.Error("Slim changed the CRD it was given")
	}
}
