package operation

import (
	"context"
	"fmt"

	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	storagemigrationv1beta1 "k8s.io/api/storagemigration/v1beta1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/maybestored"
	"github.com/svm-project/svm/internal/resources"
)

// storageStates is svm's StorageState API, read through the dynamic client
// so that a cluster without svm's CRDs answers "no match", not an error.
var storageStates = migrationv1alpha1.GroupVersion.WithResource("storagestates")

// Evidence reads what tells whether objects of gvr may be stored in its
// version (maybestored): svm's StorageState of the resource and, for a
// custom resource (crd not nil), the in-tree migrations of it. The
// objects created before crd are the caller's to count
// (CreatedBeforeCRD, -1 here).
func (o *Operations) Evidence(ctx context.Context, gvr schema.GroupVersionResource, kind string, crd *apiextensionsv1.CustomResourceDefinition) (maybestored.Evidence, error) {
	e := maybestored.Evidence{Group: gvr.Group, Version: gvr.Version, Kind: kind, CRD: crd, CreatedBeforeCRD: -1}
	var err error
	if e.State, err = o.storageState(ctx, gvr.GroupResource()); err != nil {
		return e, err
	}
	if crd != nil {
		e.InTree, err = o.inTreeMigrations(ctx, gvr.GroupResource())
	}
	return e, err
}

// storageState reads svm's StorageState of gr: nil when there is none, or
// svm's API is not served.
func (o *Operations) storageState(ctx context.Context, gr schema.GroupResource) (*migrationv1alpha1.StorageState, error) {
	name := resources.DisplayName(gr)
	u, err := o.clients.Dynamic.Resource(storageStates).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read storagestate %s: %w", name, err)
	}
	var s migrationv1alpha1.StorageState
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &s); err != nil {
		return nil, fmt.Errorf("read storagestate %s: %w", name, err)
	}
	return &s, nil
}

// inTreeMigrations reads the in-tree migrations of gr, in
// storagemigration.k8s.io/v1, or in v1beta1 where v1 is not served (1.35
// and 1.36; asked only then, for the deprecation warning it would print);
// none where neither is served.
func (o *Operations) inTreeMigrations(ctx context.Context, gr schema.GroupResource) ([]storagemigrationv1.StorageVersionMigration, error) {
	for _, gv := range []schema.GroupVersion{storagemigrationv1.SchemeGroupVersion, storagemigrationv1beta1.SchemeGroupVersion} {
		list, err := o.clients.Dynamic.Resource(gv.WithResource("storageversionmigrations")).List(ctx, metav1.ListOptions{})
		switch {
		case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
			continue
		case err != nil:
			return nil, fmt.Errorf("list %s storageversionmigrations: %w", gv, err)
		}
		var out []storagemigrationv1.StorageVersionMigration
		for i := range list.Items {
			m, err := inTreeOf(gv, list.Items[i].Object)
			if err != nil {
				return nil, fmt.Errorf("read %s storageversionmigration %s: %w", gv, list.Items[i].GetName(), err)
			}
			if m.Spec.Resource.Group == gr.Group && m.Spec.Resource.Resource == gr.Resource {
				out = append(out, m)
			}
		}
		return out, nil
	}
	return nil, nil
}

// inTreeOf reads an in-tree migration listed in gv as a v1 one: v1beta1
// has the same fields (internal/intree converts them the same way; it is
// not imported here, for it would bring controller-runtime into
// pkg/migrate's imports).
func inTreeOf(gv schema.GroupVersion, obj map[string]any) (storagemigrationv1.StorageVersionMigration, error) {
	var m storagemigrationv1.StorageVersionMigration
	err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &m)
	m.APIVersion = storagemigrationv1.SchemeGroupVersion.String()
	return m, err
}
