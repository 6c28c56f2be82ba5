package managedfields

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	apimanagedfields "k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/openapi"
	"k8s.io/client-go/openapi3"
	"k8s.io/kube-openapi/pkg/schemaconv"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	smdschema "sigs.k8s.io/structured-merge-diff/v6/schema"
	"sigs.k8s.io/structured-merge-diff/v6/typed"
)

// versionSchema is one version of a kind as the field manager reads it,
// from the API server's OpenAPI v3 document of its group-version.
type versionSchema struct {
	gvk       schema.GroupVersionKind
	converter apimanagedfields.TypeConverter
	types     *smdschema.Schema
	root      smdschema.TypeRef
	// models are the document's schemas, which say what values a field
	// allows (its enum); the kind's is named by root.
	models map[string]*spec.Schema
}

// loadSchema reads gvk's schema; nil, with no error, when the API server
// does not serve its group-version.
func loadSchema(ctx context.Context, client openapi.Client, gvk schema.GroupVersionKind) (*versionSchema, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	doc, err := openapi3.NewRoot(client).GVSpec(gvk.GroupVersion())
	var notFound *openapi3.GroupVersionNotFoundError
	switch {
	case errors.As(err, &notFound), apierrors.IsNotFound(err):
		// Not in the index, or, read straight from its path (documents),
		// not found there.
		return nil, nil
	case err != nil:
		return nil, err
	case doc.Components == nil:
		return nil, fmt.Errorf("its OpenAPI document has no schemas")
	}
	return newVersionSchema(doc.Components.Schemas, gvk)
}

// schemaWait bounds how long a served version's schema is waited for: the
// API server publishes a CRD's OpenAPI document a moment after the CRD
// changes, and a version it serves has one.
const schemaWait = 30 * time.Second

// awaitSchema is loadSchema for a version the API server serves: it asks
// again, through trouble too, until the version's document has the kind,
// for at most schemaWait.
func awaitSchema(ctx context.Context, client openapi.Client, gvk schema.GroupVersionKind) (*versionSchema, error) {
	var vs *versionSchema
	var last error
	// The poll ends with vs, or with ctx, or at schemaWait: said below.
	_ = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, schemaWait, true, func(ctx context.Context) (bool, error) {
		vs, last = loadSchema(ctx, client, gvk)
		return vs != nil, nil
	})
	switch {
	case vs != nil:
		return vs, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case last != nil:
		return nil, last
	}
	return nil, fmt.Errorf("the API server published no schema of %s in %s", gvk.Kind, schemaWait)
}

// newVersionSchema is gvk's schema among models, the schemas of its
// group-version's OpenAPI document; nil when they have none for gvk.
func newVersionSchema(models map[string]*spec.Schema, gvk schema.GroupVersionKind) (*versionSchema, error) {
	name, ok := modelOf(models, gvk)
	if !ok {
		return nil, nil
	}
	types, err := schemaconv.ToSchemaFromOpenAPI(models, false)
	if err != nil {
		return nil, fmt.Errorf("convert its OpenAPI schemas: %w", err)
	}
	converter, err := apimanagedfields.NewTypeConverter(models, false)
	if err != nil {
		return nil, err
	}
	return &versionSchema{gvk: gvk, converter: converter, types: types, root: smdschema.TypeRef{NamedType: &name}, models: models}, nil
}

// modelOf finds the schema of gvk by the extension Kubernetes marks every
// top-level schema with.
func modelOf(models map[string]*spec.Schema, gvk schema.GroupVersionKind) (string, bool) {
	for name, s := range models {
		if s == nil {
			continue
		}
		list, _ := s.Extensions["x-kubernetes-group-version-kind"].([]any)
		if slices.ContainsFunc(list, func(x any) bool {
			m, _ := x.(map[string]any)
			return m["group"] == gvk.Group && m["version"] == gvk.Version && m["kind"] == gvk.Kind
		}) {
			return name, true
		}
	}
	return "", false
}

// has reports whether the schema has a field at p, whether or not an
// object has a value there: a zero value that JSON omits is still a field.
func (vs *versionSchema) has(p fieldpath.Path) bool {
	tr := vs.root
	for _, pe := range p {
		atom, ok := vs.types.Resolve(tr)
		if !ok {
			return false
		}
		if tr, ok = step(atom, pe); !ok {
			return false
		}
	}
	return true
}

// step is the type of pe's node in a node of type atom.
func step(atom smdschema.Atom, pe fieldpath.PathElement) (smdschema.TypeRef, bool) {
	switch {
	case pe.FieldName != nil:
		if atom.Map == nil {
			return smdschema.TypeRef{}, false
		}
		if f, ok := atom.Map.FindField(*pe.FieldName); ok {
			return f.Type, true
		}
		// A map's values, or the fields an object preserves unknown.
		e := atom.Map.ElementType
		return e, e.NamedType != nil || e.Inlined != (smdschema.Atom{})
	case pe.Key != nil:
		l := atom.List
		if l == nil || l.ElementRelationship != smdschema.Associative || len(l.Keys) != len(*pe.Key) {
			return smdschema.TypeRef{}, false
		}
		for _, f := range *pe.Key {
			if !slices.Contains(l.Keys, f.Name) {
				return smdschema.TypeRef{}, false
			}
		}
		return l.ElementType, true
	case pe.Value != nil:
		l := atom.List
		return smdschema.TypeRef{}, l != nil && l.ElementRelationship == smdschema.Associative && len(l.Keys) == 0
	case pe.Index != nil:
		l := atom.List
		if l == nil {
			return smdschema.TypeRef{}, false
		}
		return l.ElementType, true
	}
	return smdschema.TypeRef{}, false
}

// enum is the values the schema allows at p, nil when it names none.
func (vs *versionSchema) enum(p fieldpath.Path) []any {
	s := vs.models[*vs.root.NamedType]
	for _, pe := range p {
		if s = vs.deref(s); s == nil {
			return nil
		}
		switch {
		case pe.FieldName != nil:
			if prop, ok := s.Properties[*pe.FieldName]; ok {
				s = &prop
			} else if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
				s = s.AdditionalProperties.Schema
			} else {
				return nil
			}
		case s.Items != nil && s.Items.Schema != nil:
			s = s.Items.Schema
		default:
			return nil
		}
	}
	if s = vs.deref(s); s == nil {
		return nil
	}
	return s.Enum
}

// deref follows s's reference to another schema of the document, as
// schemaconv does (by the reference's last segment, or a lone allOf's).
func (vs *versionSchema) deref(s *spec.Schema) *spec.Schema {
	for range 16 {
		if s == nil {
			return nil
		}
		ref := s.Ref.String()
		if ref == "" && len(s.AllOf) == 1 {
			ref = s.AllOf[0].Ref.String()
		}
		if ref == "" {
			return s
		}
		s = vs.models[ref[strings.LastIndex(ref, "/")+1:]]
	}
	return nil
}

// fields is what the field manager sees of u, an object of this version.
func (vs *versionSchema) fields(u *unstructured.Unstructured) (fieldsOf, error) {
	c := u.DeepCopy()
	c.SetManagedFields(nil)
	tv, err := vs.converter.ObjectToTyped(c, typed.AllowDuplicates)
	if err != nil {
		return fieldsOf{}, err
	}
	set, err := tv.ToFieldSet()
	if err != nil {
		return fieldsOf{}, err
	}
	return newFieldsOf(set), nil
}

// schemaMapper places a field where it is, if the version kept has it:
// right for versions whose conversion keeps paths (a CRD without a
// webhook, whose objects only change apiVersion; Kubernetes' own
// versions). It needs nothing but the object's metadata, unless an entry
// owns a field the version kept has no place for.
//
// Such a field is dropped from the entry when the object, read in the
// version kept, which is also the one it is stored in (a custom
// resource's storage version), has no value there either: it owns
// nothing, since no version the object can still be read or written in
// has it (a field the new version removed, which the API server prunes
// from the object), and it is the one thing that would keep its entry
// naming the retired version forever. A field the object does have a value at, or one whose
// place cannot be told, keeps the whole entry where it is (NotInVersion):
// its manager may still own something there.
type schemaMapper struct {
	kept *versionSchema
	// read reads the object in the version kept, at the resourceVersion
	// its entries were read at (a conflict when it changed since); nil
	// when no client was given, and then no field is dropped.
	read func(ctx context.Context, do Do, obj *Object) (*unstructured.Unstructured, error)
}

func (schemaMapper) Read(_ context.Context, _ Do, listed *metav1.PartialObjectMetadata) (*Object, error) {
	return ObjectOf(listed), nil
}

func (schemaMapper) ReadsObjects() bool { return false }

func (m schemaMapper) Place(ctx context.Context, do Do, obj *Object, _ metav1.ManagedFieldsEntry, fields *fieldpath.Set) (*fieldpath.Set, error) {
	missing := fieldpath.NewSet()
	fields.Iterate(func(p fieldpath.Path) {
		if !m.kept.has(p) {
			missing.Insert(p.Copy())
		}
	})
	if missing.Empty() {
		return fields, nil
	}
	var u *unstructured.Unstructured
	if m.read != nil && obj != nil {
		var err error
		if u, err = m.read(ctx, do, obj); err != nil {
			return nil, err
		}
	}
	var held fieldpath.Path
	missing.Iterate(func(p fieldpath.Path) {
		if held == nil && (u == nil || mayHave(u.Object, p)) {
			held = p.Copy()
		}
	})
	if held != nil {
		return nil, unmapped(NotInVersion, "%s has no field %s", m.kept.gvk.GroupVersion(), held)
	}
	return fields.Difference(missing), nil
}

// mayHave reports whether obj may have a value at p: false only when a
// field on p's way is absent (or its parent holds no fields). A list
// item or a set member cannot be told apart without the schema that is
// missing, so it may be there.
func mayHave(obj map[string]any, p fieldpath.Path) bool {
	var cur any = obj
	for _, pe := range p {
		if pe.FieldName == nil {
			return true
		}
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[*pe.FieldName]; !ok {
			return false
		}
	}
	return true
}
