package round

import (
	"context"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
)

// Objects are svm's own objects a round decides from.
type Objects struct {
	States     []migrationv1alpha1.StorageState
	Migrations []migrationv1alpha1.StorageVersionMigration
}

// Pages of the lists a round reads: a round holds what it read for its
// whole length, and a page decoded whole (managedFields, a CRD's schemas)
// is garbage once slimmed; the pages bound that garbage, not the cluster.
// CRDs are read in smaller pages: one may carry a schema of a megabyte.
const (
	objectsPage = 500
	crdsPage    = 50
)

// ReadObjects lists every StorageState and StorageVersionMigration through
// r, which must read straight from the API server: a round never decides
// from a cache that lags its own last writes (and, say, creates a second
// migration). Their managedFields are left out, as the manager's cache
// leaves them out: no decision reads them, and an Update of an object
// without them keeps those the API server has.
func ReadObjects(ctx context.Context, r client.Reader) (Objects, error) {
	var objs Objects
	var states migrationv1alpha1.StorageStateList
	err := ListPages(ctx, r, &states, objectsPage, func() {
		for i := range states.Items {
			states.Items[i].ManagedFields = nil
		}
		objs.States = append(objs.States, states.Items...)
	})
	if err != nil {
		return Objects{}, fmt.Errorf("list storage states: %w", err)
	}
	var migrations migrationv1alpha1.StorageVersionMigrationList
	err = ListPages(ctx, r, &migrations, objectsPage, func() {
		for i := range migrations.Items {
			migrations.Items[i].ManagedFields = nil
		}
		objs.Migrations = append(objs.Migrations, migrations.Items...)
	})
	if err != nil {
		return Objects{}, fmt.Errorf("list migrations: %w", err)
	}
	return objs, nil
}

// ReadCRDs lists every CustomResourceDefinition through r, straight from
// the API server, each as Slim leaves it.
func ReadCRDs(ctx context.Context, r client.Reader) ([]apiextensionsv1.CustomResourceDefinition, error) {
	var out []apiextensionsv1.CustomResourceDefinition
	var crds apiextensionsv1.CustomResourceDefinitionList
	err := ListPages(ctx, r, &crds, crdsPage, func() {
		for i := range crds.Items {
			out = append(out, Slim(&crds.Items[i]))
		}
	})
	if err != nil {
		return nil, fmt.Errorf("list CustomResourceDefinitions: %w", err)
	}
	return out, nil
}

// Slim is crd with what a round reads of it: its metadata but
// managedFields, its group, names, scope and versions (each one's name,
// whether it is served, stored, deprecated) and its status. Left out are
// the schemas, subresources, columns and conversion, often most of a
// CRD's bytes. A status update of a slim CRD (a prune of its
// storedVersions) changes its status alone: the API server takes a status
// update's spec from the object it has, and keeps its managedFields when
// the update sends none.
func Slim(crd *apiextensionsv1.CustomResourceDefinition) apiextensionsv1.CustomResourceDefinition {
	out := apiextensionsv1.CustomResourceDefinition{TypeMeta: crd.TypeMeta, ObjectMeta: crd.ObjectMeta, Status: crd.Status}
	out.ManagedFields = nil
	out.Spec = apiextensionsv1.CustomResourceDefinitionSpec{Group: crd.Spec.Group, Names: crd.Spec.Names, Scope: crd.Spec.Scope}
	out.Spec.Versions = make([]apiextensionsv1.CustomResourceDefinitionVersion, len(crd.Spec.Versions))
	for i, v := range crd.Spec.Versions {
		out.Spec.Versions[i] = apiextensionsv1.CustomResourceDefinitionVersion{
			Name: v.Name, Served: v.Served, Storage: v.Storage, Deprecated: v.Deprecated,
		}
	}
	return out
}

// ListPages lists into list through r, page objects at a time, calling
// each after every page (list then holds the page's items).
func ListPages(ctx context.Context, r client.Reader, list client.ObjectList, page int64, each func()) error {
	cont := ""
	for {
		if err := r.List(ctx, list, client.Limit(page), client.Continue(cont)); err != nil {
			return err
		}
		each()
		if cont = list.GetContinue(); cont == "" {
			return nil
		}
	}
}
