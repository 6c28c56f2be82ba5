package managedfields

import (
	"context"
	"errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// builtinMapper places the fields of a built-in resource's entry: at their
// own paths, and only where the API server shows that its conversion keeps
// them there. Kubernetes' conversions between a built-in's versions do not
// all keep paths: autoscaling/v1 keeps v2's spec.behavior, the metrics
// other than CPU and the status conditions as JSON in annotations
// (autoscaling.alpha.kubernetes.io/...), and a version may rename or
// restructure a field. Such a field is at no path of the version kept
// that svm could claim for the entry without guessing, so the entry is
// left where it is (NotConverted).
//
// A field stays when the version kept's schema has it (else NotInVersion,
// as for a CRD) and, for a field the object has a value at in the entry's
// version, the object has the same value at the same path in the version
// kept and a dry-run update changing it there (see serverMapper.probe)
// changes it in the version kept there and nowhere else; when the API
// server refuses that change (an immutable field), the two reads alone
// show it. A field neither version shows a value at (a zero value JSON
// omits) stays where both schemas have it. When the entry's version is
// not served, nothing can convert from it: a field stays only where the
// object has a value in the version kept (else NotServed).
type builtinMapper struct {
	*serverMapper
}

// Place keeps e's fields where they are, when they are there in the
// version kept (see builtinMapper).
func (m builtinMapper) Place(ctx context.Context, do Do, obj *Object, e metav1.ManagedFieldsEntry, fields *fieldpath.Set) (*fieldpath.Set, error) {
	kept := m.types[m.kept.GroupVersion().String()]
	if _, err := (schemaMapper{kept: kept}).Place(ctx, do, nil, e, fields); err != nil {
		return nil, err
	}
	_, rest := splitIdentity(fields)
	if rest.Empty() {
		return fields, nil
	}
	uTo := obj.in[e2v(kept)]
	inTo, err := kept.fields(uTo)
	if err != nil {
		return nil, unmapped(NotConverted, "the schema of %s does not read the object: %v", e2v(kept), err)
	}
	from := m.types[e.APIVersion]
	var uFrom *unstructured.Unstructured
	var inFrom *fieldsOf
	if from != nil {
		if uFrom, err = m.in(ctx, do, obj, e.APIVersion); err != nil {
			return nil, err
		}
		f, err := from.fields(uFrom)
		if err != nil {
			return nil, unmapped(NotConverted, "the schema of %s does not read the object: %v", e.APIVersion, err)
		}
		inFrom = &f
	}
	probe, err := samePaths(rest, paired{schema: from, object: uFrom, fields: inFrom}, paired{schema: kept, object: uTo, fields: &inTo}, e.APIVersion)
	switch {
	case err != nil:
		return nil, err
	case probe.Empty():
		return fields, nil
	}
	image, err := m.probe(ctx, do, obj, from, uFrom, probe, kept, inTo.nodes)
	if refused(err) {
		// Validation refuses some change (an immutable field, a webhook
		// that refuses dry runs): each leaf alone.
		if err := m.probeEach(ctx, do, obj, from, uFrom, probe, kept, inTo.nodes); err != nil {
			return nil, err
		}
		return fields, nil
	}
	if err != nil {
		return nil, err
	}
	if !image.Equals(probe) {
		return nil, movedElsewhere(probe, image, e.APIVersion, e2v(kept))
	}
	return fields, nil
}

// probeEach probes every leaf of probe alone. A leaf whose change the API
// server refuses too is shown where it is by the two reads alone: the
// object has the same value at its path in both versions (samePaths).
func (m builtinMapper) probeEach(ctx context.Context, do Do, obj *Object, from *versionSchema, uFrom *unstructured.Unstructured,
	probe *fieldpath.Set, kept *versionSchema, observed *fieldpath.Set) error {
	var leaves []fieldpath.Path
	probe.Iterate(func(p fieldpath.Path) { leaves = append(leaves, p.Copy()) })
	for _, p := range leaves {
		one := fieldpath.NewSet(p)
		image, err := m.probe(ctx, do, obj, from, uFrom, one, kept, observed)
		switch {
		case refused(err):
			continue
		case err != nil:
			return err
		case !image.Equals(one):
			return movedElsewhere(one, image, e2v(from), e2v(kept))
		}
	}
	return nil
}

// refused reports whether err is the API server's refusal of a dry run.
func refused(err error) bool {
	var u *Unmapped
	return errors.As(err, &u) && u.Reason == Refused
}

// movedElsewhere says how a change to probe in version from showed image
// in version to, another set of paths.
func movedElsewhere(probe, image *fieldpath.Set, from, to string) *Unmapped {
	if elsewhere := image.Difference(probe); !elsewhere.Empty() {
		return unmapped(NotConverted, "the conversion from %s puts its fields elsewhere in %s (a change to them changes %s)", from, to, first(elsewhere))
	}
	return unmapped(NotConverted, "the conversion from %s does not keep %s at its path in %s", from, first(probe.Difference(image)), to)
}

// paired is the object as one version serves it: its schema, the object
// and what the field manager sees of it; nil when the version is not
// served.
type paired struct {
	schema *versionSchema
	object *unstructured.Unstructured
	fields *fieldsOf
}

// samePaths decides, for rest, the fields of a built-in's entry that a
// conversion may move, which of them a dry run must show staying at their
// paths (the leaves the object has a value at), or why the entry stays
// where it is. from is the object in the entry's version (apiVersion),
// to in the version kept, whose schema has every field of rest.
func samePaths(rest *fieldpath.Set, from, to paired, apiVersion string) (probe *fieldpath.Set, err error) {
	probe = fieldpath.NewSet()
	var failed *Unmapped
	rest.Iterate(func(f fieldpath.Path) {
		if failed != nil {
			return
		}
		if from.fields == nil {
			if !to.fields.nodes.Has(f) {
				failed = unmapped(NotServed, "%s is not served: nothing shows where its field %s is, and the object has no value there in %s", apiVersion, f, e2v(to.schema))
			}
			return
		}
		var probed bool
		probed, failed = samePath(f, from, to, apiVersion)
		if probed {
			probe.Insert(f.Copy())
		}
	})
	if failed != nil {
		return nil, failed
	}
	return probe, nil
}

// samePath decides for one field f of the entry: a leaf the object has a
// value at is probed, and must hold the same value in both versions; a
// list item, map or key must be at the same path in both; a field neither
// version shows stays where both schemas have it.
func samePath(f fieldpath.Path, from, to paired, apiVersion string) (probed bool, failed *Unmapped) {
	kept := e2v(to.schema)
	switch {
	case from.fields.leaves.Has(f) && !isKey(f):
		if !to.fields.leaves.Has(f) {
			return false, unmapped(NotConverted, "the object has %s in %s and not in %s: the conversion puts it elsewhere", f, apiVersion, kept)
		}
		a, _ := at(from.object.Object, f)
		b, _ := at(to.object.Object, f)
		if !same(a, b) {
			return false, unmapped(NotConverted, "%s holds another value in %s than in %s: the conversion changes it", f, kept, apiVersion)
		}
		// An empty list or map has no other value to change it to: the
		// two reads alone show it.
		_, err := another(a)
		return err == nil, nil
	case from.fields.nodes.Has(f):
		if !to.fields.nodes.Has(f) {
			return false, unmapped(NotConverted, "the object has %s in %s and not in %s: the conversion puts it elsewhere", f, apiVersion, kept)
		}
	case to.fields.nodes.Has(f):
		return false, unmapped(NotConverted, "the object has %s in %s and not in %s: the conversion puts it there from elsewhere", f, kept, apiVersion)
	case !from.schema.has(f):
		return false, unmapped(Unplaced, "it owns %s, which %s has no field at", f, apiVersion)
	}
	return false, nil
}
