package managedfields

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/openapi"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/svm-project/svm/internal/crdversions"
)

// Do sends one request, fn, as the caller paces, bounds and retries its
// requests; verb names it ("get", "dryrun"). nil sends it as it is.
type Do func(ctx context.Context, verb string, fn func(context.Context) error) error

func (do Do) call(ctx context.Context, verb string, fn func(context.Context) error) error {
	if do == nil {
		return fn(ctx)
	}
	return do(ctx, verb, fn)
}

// Object is one object as a Mapper read it: what a write of its entries
// must be guarded by, and its entries.
type Object struct {
	Namespace, Name string
	UID             string
	ResourceVersion string
	Entries         []metav1.ManagedFieldsEntry
	// in holds the object as versions serve it, all read at
	// ResourceVersion, by apiVersion (serverMapper only).
	in map[string]*unstructured.Unstructured
}

// ObjectOf is o's metadata as an Object.
func ObjectOf(o *metav1.PartialObjectMetadata) *Object {
	return &Object{Namespace: o.Namespace, Name: o.Name, UID: string(o.UID), ResourceVersion: o.ResourceVersion, Entries: o.ManagedFields}
}

// Mapper places the fields of an entry that names a retired version in the
// version kept.
type Mapper interface {
	// Read reads what Place needs of the object listed. A Mapper that
	// needs nothing but its metadata returns listed as it is.
	Read(ctx context.Context, do Do, listed *metav1.PartialObjectMetadata) (*Object, error)
	// Place returns where e's fields are in the version kept: an
	// *Unmapped when they cannot be placed; a conflict when obj changed
	// since it was read (read it again); any other error when the object
	// cannot be handled now.
	Place(ctx context.Context, do Do, obj *Object, e metav1.ManagedFieldsEntry, fields *fieldpath.Set) (*fieldpath.Set, error)
	// ReadsObjects reports whether Read asks the API server; one that
	// does not is given freshly read metadata after a conflict.
	ReadsObjects() bool
}

// Mover moves the entries of one resource's objects that name retired
// versions: Retarget says which versions, Mapper where their fields are
// in the version kept.
type Mover struct {
	Retarget
	Mapper Mapper
}

// Move moves obj's entries (see Retarget.Move).
func (m *Mover) Move(ctx context.Context, do Do, obj *Object) (Result, error) {
	return m.Retarget.Move(obj.Entries, func(e metav1.ManagedFieldsEntry, fields *fieldpath.Set) (*fieldpath.Set, error) {
		return m.Mapper.Place(ctx, do, obj, e, fields)
	})
}

// Clients are what a Mover asks the API server with.
type Clients struct {
	// Dynamic reads objects and sends the dry runs that convert them.
	Dynamic dynamic.Interface
	// OpenAPI reads the versions' OpenAPI v3 documents (discovery's
	// OpenAPIV3).
	OpenAPI openapi.Client
	// Documents, if set, reads the versions' OpenAPI v3 documents instead
	// of OpenAPI, each straight from its path (discovery's RESTClient):
	// one request per document read, without the index of every
	// group-version's document that OpenAPI reads first.
	Documents rest.Interface
	// FieldManager names the dry runs.
	FieldManager string
}

// Resource is what For needs to know of a resource.
type Resource struct {
	// Kept is the resource in the version kept, which its objects are
	// read in and their entries name instead.
	Kept schema.GroupVersionResource
	// Kind is its kind.
	Kind string
	// Retired are the versions (of Kept's group) entries stop naming.
	Retired []string
	// CRD is the resource's CustomResourceDefinition, nil for a built-in
	// (or aggregated) resource.
	CRD *apiextensionsv1.CustomResourceDefinition
}

// For is the one rule of how a resource's entries move, which the
// controller, svm retire and pkg/migrate all use: with a conversion
// webhook the API server converts; a CRD's fields otherwise keep their
// paths, where the kept version's schema has them; a built-in resource's
// keep their paths only where the API server shows that its conversion
// keeps them there (builtinMapper). It reads the versions' OpenAPI
// documents once. ok is false when no version is left to retire.
func For(ctx context.Context, r Resource, c Clients) (m *Mover, ok bool, err error) {
	rt, ok := Between(r.Kept.Group, r.Retired, r.Kept.Version)
	if !ok {
		return nil, false, nil
	}
	if c.Documents != nil {
		c.OpenAPI = documents{client: c.Documents, gvs: neededDocuments(r, rt)}
	}
	kept, err := awaitSchema(ctx, c.OpenAPI, r.Kept.GroupVersion().WithKind(r.Kind))
	if err != nil {
		return nil, false, fmt.Errorf("read the schema of %s: %w", r.Kept.GroupVersion(), err)
	}
	if r.CRD == nil {
		m, err := forBuiltIn(ctx, r, c, rt, kept)
		if err != nil {
			return nil, false, err
		}
		return &Mover{Retarget: rt, Mapper: m}, true, nil
	}
	if !converts(r.CRD) {
		m := schemaMapper{kept: kept}
		if c.Dynamic != nil && r.CRD != nil && crdversions.StorageVersion(r.CRD) == r.Kept.Version {
			// Read in the version kept, which is the one the object is
			// stored in: what it lacks there, it lacks for good.
			m.read = func(ctx context.Context, do Do, obj *Object) (*unstructured.Unstructured, error) {
				return readAt(ctx, do, c.Dynamic, r.Kept, obj)
			}
		}
		return &Mover{Retarget: rt, Mapper: m}, true, nil
	}
	if c.Dynamic == nil {
		return nil, false, fmt.Errorf("%s converts through a webhook, and no client was given to ask the API server to convert", r.CRD.Name)
	}
	s := &serverMapper{kept: r.Kept, client: c.Dynamic, fieldManager: c.FieldManager,
		types: map[string]*versionSchema{rt.Target: kept}}
	for _, v := range r.CRD.Spec.Versions {
		gv := schema.GroupVersion{Group: r.Kept.Group, Version: v.Name}
		if !v.Served || !slices.Contains(rt.Retired, gv.String()) {
			// Not served: the API server cannot convert from it, and
			// its entries are left (NotServed).
			continue
		}
		vs, err := awaitSchema(ctx, c.OpenAPI, gv.WithKind(r.Kind))
		if err != nil {
			return nil, false, fmt.Errorf("read the schema of %s: %w", gv, err)
		}
		s.types[gv.String()] = vs
	}
	return &Mover{Retarget: rt, Mapper: s}, true, nil
}

// forBuiltIn is the Mapper of a built-in (or aggregated) resource, whose
// versions Kubernetes' own conversions may move a field between (see
// builtinMapper): it reads the schemas of the retired versions served.
func forBuiltIn(ctx context.Context, r Resource, c Clients, rt Retarget, kept *versionSchema) (Mapper, error) {
	if c.Dynamic == nil {
		return nil, fmt.Errorf("no client was given to ask the API server where %s keeps the fields of %s", r.Kept.GroupVersion(), strings.Join(rt.Retired, ", "))
	}
	s := &serverMapper{kept: r.Kept, client: c.Dynamic, fieldManager: c.FieldManager,
		types: map[string]*versionSchema{rt.Target: kept}}
	for _, v := range rt.Retired {
		gv, err := schema.ParseGroupVersion(v)
		if err != nil {
			return nil, err
		}
		// nil when the version is not served: nothing converts from it.
		vs, err := loadSchema(ctx, c.OpenAPI, gv.WithKind(r.Kind))
		if err != nil {
			return nil, fmt.Errorf("read the schema of %s: %w", gv, err)
		}
		if vs != nil {
			s.types[v] = vs
		}
	}
	return builtinMapper{serverMapper: s}, nil
}

// converts reports whether a CRD converts through a webhook: anything but
// apiVersion may then change between versions.
func converts(crd *apiextensionsv1.CustomResourceDefinition) bool {
	return crd != nil && crd.Spec.Conversion != nil && crd.Spec.Conversion.Strategy == apiextensionsv1.WebhookConverter
}
