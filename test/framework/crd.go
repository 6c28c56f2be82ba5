package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/svm-project/svm/internal/resources"
)

// InstallCRDs creates every CRD in dir's YAML files and waits until each is
// established.
func (e *Env) InstallCRDs(t testing.TB, dir string) []*apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crds, err := e.installCRDs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return crds
}

func (e *Env) installCRDs(dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, entry := range entries {
		if !strings.HasSuffix(entry.Name(), ".yaml") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, entry.Name()))
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(data, crd); err != nil {
			return nil, fmt.Errorf("decode %s: %w", entry.Name(), err)
		}
		if err := e.Client.Create(ctx, crd); err != nil {
			return nil, fmt.Errorf("create CRD %s: %w", crd.Name, err)
		}
		if err := e.waitEstablished(ctx, crd.Name); err != nil {
			return nil, err
		}
		crds = append(crds, crd)
	}
	if len(crds) == 0 {
		return nil, fmt.Errorf("no CRDs in %s", dir)
	}
	return crds, nil
}

// WaitEstablished waits until the named CRD is established and served.
func (e *Env) WaitEstablished(t testing.TB, name string) {
	t.Helper()
	if err := e.waitEstablished(Context(t, time.Minute), name); err != nil {
		t.Fatal(err)
	}
}

func (e *Env) waitEstablished(ctx context.Context, name string) error {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if err := e.Client.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			return false, err
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s not established: %w", name, err)
	}
	// Established is set before the resource is in discovery; wait for that
	// too, or the first request may be a 404.
	gv := schema.GroupVersion{Group: crd.Spec.Group, Version: crd.Spec.Versions[0].Name}.String()
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := e.Discovery.ServerResourcesForGroupVersion(gv)
		if err != nil {
			return false, nil
		}
		for _, r := range list.APIResources {
			if r.Name == crd.Spec.Names.Plural {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s not in discovery: %w", name, err)
	}
	return nil
}

// Resource is a two-version custom resource like Widgets, under a group,
// plural and kind of the test's choosing, so that scenarios sharing one
// control plane never touch each other's objects, and the API server's
// request counts (which name the plural only) tell them apart.
type Resource struct {
	Group, Plural, Kind string
}

// GVR is the resource in version ("v1" or "v2").
func (r Resource) GVR(version string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: r.Group, Version: version, Resource: r.Plural}
}

// CRDName is the name of the resource's CRD.
func (r Resource) CRDName() string { return r.Plural + "." + r.Group }

// EtcdPrefix is where the API server keeps the resource's objects.
func (r Resource) EtcdPrefix() string { return EtcdPrefix(r.GVR("v1").GroupResource()) }

// CreateResource creates r's CRD, served in v1 and v2 with v1 stored, and
// waits until it is served.
func (e *Env) CreateResource(t testing.TB, r Resource) {
	t.Helper()
	e.createCRD(t, r, "v1")
}

// FlipStorage makes the version of r that is not stored (v2 after
// CreateResource) the storage version, waits until discovery says so, so
// that every object created before needs a migration, and returns it.
func (e *Env) FlipStorage(t testing.TB, r Resource) string {
	t.Helper()
	to := "v2"
	if e.StorageVersionHash(t, r.GVR("v1")) == resources.StorageVersionHash(r.Group, "v2", r.Kind) {
		to = "v1"
	}
	e.SetStorage(t, r, to)
	return to
}

// SetStorage makes version the storage version of r, unless it is, and
// waits until discovery's storageVersionHash says so.
func (e *Env) SetStorage(t testing.TB, r Resource, version string) {
	t.Helper()
	hash := e.StorageVersionHash(t, r.GVR("v1"))
	if hash == resources.StorageVersionHash(r.Group, version, r.Kind) {
		return
	}
	e.SetCRDStorageVersion(t, r.CRDName(), version)
	e.WaitStorageVersionHashChange(t, r.GVR("v1"), hash)
}

// CRDStoredVersions is the named CRD's status.storedVersions.
func (e *Env) CRDStoredVersions(t testing.TB, name string) []string {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := e.Client.Get(Context(t, time.Minute), client.ObjectKey{Name: name}, crd); err != nil {
		t.Fatalf("get CRD %s: %v", name, err)
	}
	return crd.Status.StoredVersions
}

// CRDServes reports whether the CRD named name serves version.
func (e *Env) CRDServes(t testing.TB, name, version string) bool {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := e.Client.Get(Context(t, time.Minute), client.ObjectKey{Name: name}, crd); err != nil {
		t.Fatalf("get CRD %s: %v", name, err)
	}
	return slices.ContainsFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == version && v.Served })
}

// Widgets is the test custom resource: widgets.example.com, served in v1 and
// v2 with the same schema, so a storage flip changes only the stored
// apiVersion and every field survives conversion unchanged.
var Widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

// WidgetsCRDName is the name of the Widgets CRD.
const WidgetsCRDName = "widgets.example.com"

// WidgetResource is Widgets as a Resource.
var WidgetResource = Resource{Group: Widgets.Group, Plural: Widgets.Resource, Kind: "Widget"}

// CreateWidgetCRD creates the Widgets CRD with storageVersion as the storage
// version and waits until it is served.
func (e *Env) CreateWidgetCRD(t testing.TB, storageVersion string) {
	t.Helper()
	e.createCRD(t, WidgetResource, storageVersion)
}

// CreateResourceWithShortNames creates r's CRD as CreateResource does, with
// shortNames, and waits until it is served. Two resources given the same
// short name (or plural, in two groups) make names that are ambiguous.
func (e *Env) CreateResourceWithShortNames(t testing.TB, r Resource, shortNames ...string) {
	t.Helper()
	e.createCRD(t, r, "v1", shortNames...)
}

// createCRD creates r's CRD, served in v1 and v2 with the same schema
// (every field survives conversion unchanged) and storageVersion stored,
// and waits until it is served.
func (e *Env) createCRD(t testing.TB, r Resource, storageVersion string, shortNames ...string) {
	t.Helper()
	e.createCRDWith(t, r, storageVersion, nil, shortNames...)
}

// NewResourceWithStatus is NewResource with a status subresource, whose
// writes keep everything but status from the stored object.
func (e *Env) NewResourceWithStatus(t testing.TB) Resource {
	t.Helper()
	r := Resource{Group: TestName(t) + ".example.com", Plural: "widgets", Kind: "Widget"}
	e.createCRDWith(t, r, "v1", &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}})
	return r
}

// createCRDWith is createCRD with subresources on both versions.
func (e *Env) createCRDWith(t testing.TB, r Resource, storageVersion string, sub *apiextensionsv1.CustomResourceSubresources, shortNames ...string) {
	t.Helper()
	schemaProps := &apiextensionsv1.CustomResourceValidation{
		OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
			Type: "object",
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"spec": {Type: "object", XPreserveUnknownFields: ptr(true)},
				"data": {Type: "object", XPreserveUnknownFields: ptr(true)},
			},
		},
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: r.CRDName()},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: r.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: r.Plural, Singular: strings.ToLower(r.Kind), Kind: r.Kind, ListKind: r.Kind + "List", ShortNames: shortNames},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1", Served: true, Storage: storageVersion == "v1", Schema: schemaProps, Subresources: sub},
				{Name: "v2", Served: true, Storage: storageVersion == "v2", Schema: schemaProps, Subresources: sub},
			},
		},
	}
	if err := e.Client.Create(Context(t, time.Minute), crd); err != nil {
		t.Fatalf("create CRD %s: %v", r.CRDName(), err)
	}
	e.WaitEstablished(t, r.CRDName())
}

// SetCRDStorageVersion makes version the storage version of the named CRD.
func (e *Env) SetCRDStorageVersion(t testing.TB, name, version string) {
	t.Helper()
	ctx := Context(t, time.Minute)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := e.Client.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			return err
		}
		found := false
		for i := range crd.Spec.Versions {
			crd.Spec.Versions[i].Storage = crd.Spec.Versions[i].Name == version
			found = found || crd.Spec.Versions[i].Storage
		}
		if !found {
			return fmt.Errorf("CRD %s has no version %s", name, version)
		}
		return e.Client.Update(ctx, crd)
	})
	if err != nil {
		t.Fatalf("set storage version of %s to %s: %v", name, version, err)
	}
}

// StorageVersionHash returns discovery's storageVersionHash for gvr.
func (e *Env) StorageVersionHash(t testing.TB, gvr schema.GroupVersionResource) string {
	t.Helper()
	list, err := e.Discovery.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if err != nil {
		t.Fatalf("discover %s: %v", gvr.GroupVersion(), err)
	}
	for _, r := range list.APIResources {
		if r.Name == gvr.Resource {
			return r.StorageVersionHash
		}
	}
	t.Fatalf("%s not in discovery", gvr)
	return ""
}

// WaitStorageVersionHashChange waits until discovery's storageVersionHash for
// gvr differs from old, and returns the new hash. Discovery of a CRD is
// updated asynchronously after the CRD changes.
func (e *Env) WaitStorageVersionHashChange(t testing.TB, gvr schema.GroupVersionResource, old string) string {
	t.Helper()
	var current string
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		current = e.StorageVersionHash(t, gvr)
		return current != old, nil
	})
	if err != nil {
		t.Fatalf("storageVersionHash of %s stayed %q: %v", gvr, old, err)
	}
	return current
}

// IsAlreadyExists is apierrors.IsAlreadyExists, for brevity in tests.
func IsAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }

func ptr[T any](v T) *T { return &v }
