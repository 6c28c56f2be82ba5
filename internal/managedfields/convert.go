package managedfields

import (
	"context"
	"errors"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Observer names the synthetic entry of serverMapper's dry runs.
const Observer = "svm-conversion-observer"

// serverMapper places an entry's fields by having the API server convert
// them: the one converter of a CRD's versions svm can rely on, since a
// conversion webhook may sit behind a service only the API server reaches.
//
// A dry-run update through the entry's version sends the object with the
// entry's fields changed (each leaf to another value of its JSON type), and
// one managedFields entry of its own: an Update in the version kept, the
// observer, owning every field of the object there. The field manager
// converts the object before and after the change to the observer's
// version and takes from it what changed there: what the observer lost is
// where the entry's fields are in the version kept. A field that moved
// is checked the other way round (a dry run through the version kept,
// changing what the observer lost, with an observer in the entry's
// version), so that fields the conversion drops, merges or splits are
// found and the entry left where it is. Nothing is stored: the API server
// answers a dry run as it would the update, and keeps nothing of it.
type serverMapper struct {
	kept         schema.GroupVersionResource
	client       dynamic.Interface
	fieldManager string
	// types are the schemas of the version kept and of the retired
	// versions served, by apiVersion: a version not served has none.
	types map[string]*versionSchema
}

func (*serverMapper) ReadsObjects() bool { return true }

// Read reads the object in the version kept. It lists the one name, which
// reveals no more than a get and is what svm's controller may do.
func (m *serverMapper) Read(ctx context.Context, do Do, listed *metav1.PartialObjectMetadata) (*Object, error) {
	u, err := m.read(ctx, do, m.kept, listed.Namespace, listed.Name)
	if err != nil {
		return nil, err
	}
	return &Object{
		Namespace: u.GetNamespace(), Name: u.GetName(), UID: string(u.GetUID()), ResourceVersion: u.GetResourceVersion(),
		Entries: u.GetManagedFields(), in: map[string]*unstructured.Unstructured{m.kept.GroupVersion().String(): u},
	}, nil
}

func (m *serverMapper) read(ctx context.Context, do Do, gvr schema.GroupVersionResource, namespace, name string) (*unstructured.Unstructured, error) {
	return readByName(ctx, do, m.client, gvr, namespace, name)
}

func (m *serverMapper) resource(gvr schema.GroupVersionResource, namespace string) dynamic.ResourceInterface {
	return resourceIn(m.client, gvr, namespace)
}

func resourceIn(client dynamic.Interface, gvr schema.GroupVersionResource, namespace string) dynamic.ResourceInterface {
	if namespace == "" {
		return client.Resource(gvr)
	}
	return client.Resource(gvr).Namespace(namespace)
}

// readByName reads one object by listing its one name, which reveals no
// more than a get and is what svm's controller may do.
func readByName(ctx context.Context, do Do, client dynamic.Interface, gvr schema.GroupVersionResource, namespace, name string) (*unstructured.Unstructured, error) {
	var list *unstructured.UnstructuredList
	err := do.call(ctx, "get", func(ctx context.Context) error {
		var err error
		list, err = resourceIn(client, gvr, namespace).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(list.Items) == 0 {
		return nil, apierrors.NewNotFound(gvr.GroupResource(), name)
	}
	return &list.Items[0], nil
}

// readAt reads obj in gvr's version: a conflict when it changed since its
// entries were read, so that what is decided of them is decided on the
// object they belong to.
func readAt(ctx context.Context, do Do, client dynamic.Interface, gvr schema.GroupVersionResource, obj *Object) (*unstructured.Unstructured, error) {
	u, err := readByName(ctx, do, client, gvr, obj.Namespace, obj.Name)
	if err != nil {
		return nil, err
	}
	if u.GetResourceVersion() != obj.ResourceVersion || string(u.GetUID()) != obj.UID {
		return nil, apierrors.NewConflict(gvr.GroupResource(), obj.Name, errors.New("written while svm read its managedFields"))
	}
	return u, nil
}

// in is obj as version serves it, read at obj's resourceVersion; a
// conflict when the object changed since obj was read.
func (m *serverMapper) in(ctx context.Context, do Do, obj *Object, version string) (*unstructured.Unstructured, error) {
	if u, ok := obj.in[version]; ok {
		return u, nil
	}
	gv, err := schema.ParseGroupVersion(version)
	if err != nil {
		return nil, err
	}
	u, err := readAt(ctx, do, m.client, m.kept.GroupResource().WithVersion(gv.Version), obj)
	if err != nil {
		return nil, err
	}
	obj.in[version] = u
	return u, nil
}

// Place converts e's fields (see serverMapper).
func (m *serverMapper) Place(ctx context.Context, do Do, obj *Object, e metav1.ManagedFieldsEntry, fields *fieldpath.Set) (*fieldpath.Set, error) {
	identity, rest := splitIdentity(fields)
	if rest.Empty() {
		return identity, nil
	}
	from, ok := m.types[e.APIVersion]
	if !ok {
		return nil, unmapped(NotServed, "%s is not served: the API server cannot convert from it", e.APIVersion)
	}
	p, err := m.plan(ctx, do, obj, from, rest)
	switch {
	case err != nil:
		return nil, err
	case p.leaves.Empty():
		return nil, unmapped(Unplaced, "it owns %s and no field under it", first(p.nodes))
	}
	image, err := m.convert(ctx, do, obj, p)
	if err != nil {
		return nil, err
	}
	if err := p.placeNodes(image); err != nil {
		return nil, err
	}
	return identity.Union(image).Union(p.nodes), nil
}

// splitIdentity parts fields into those no conversion moves (see
// isIdentity) and the rest.
func splitIdentity(fields *fieldpath.Set) (identity, rest *fieldpath.Set) {
	identity, rest = fieldpath.NewSet(), fieldpath.NewSet()
	fields.Iterate(func(f fieldpath.Path) {
		if isIdentity(f) {
			identity.Insert(f)
		} else {
			rest.Insert(f)
		}
	})
	return identity, rest
}

// plan is one entry's fields, sorted by how they are placed.
type plan struct {
	from, to *versionSchema
	// uFrom and uTo are the object in the entry's version and in the
	// version kept; inFrom and inTo what the field manager sees of them.
	uFrom, uTo   *unstructured.Unstructured
	inFrom, inTo fieldsOf
	// leaves are the values the dry run changes; nodes are list items,
	// maps and keys, placed by the leaves under them.
	leaves, nodes *fieldpath.Set
}

// plan reads the object in the entry's version and sorts rest, the
// entry's fields a conversion may move.
func (m *serverMapper) plan(ctx context.Context, do Do, obj *Object, from *versionSchema, rest *fieldpath.Set) (plan, error) {
	p := plan{from: from, to: m.types[m.kept.GroupVersion().String()], leaves: fieldpath.NewSet(), nodes: fieldpath.NewSet()}
	if err := p.read(ctx, m, do, obj); err != nil {
		return p, err
	}
	var absent fieldpath.Path
	rest.Iterate(func(f fieldpath.Path) {
		switch {
		case p.inFrom.leaves.Has(f) && !isKey(f):
			p.leaves.Insert(f)
		case p.inFrom.nodes.Has(f):
			p.nodes.Insert(f)
		case absent == nil:
			absent = f.Copy()
		}
	})
	if absent != nil {
		return p, unmapped(Unplaced, "it owns %s, which the object does not have in %s", absent, e2v(p.from))
	}
	return p, nil
}

// read reads the object in the entry's version (the version kept is read
// already) and what the field manager sees of it in both.
func (p *plan) read(ctx context.Context, m *serverMapper, do Do, obj *Object) error {
	var err error
	if p.uFrom, err = m.in(ctx, do, obj, e2v(p.from)); err != nil {
		return err
	}
	p.uTo = obj.in[e2v(p.to)]
	if p.inFrom, err = p.from.fields(p.uFrom); err != nil {
		return unmapped(NotConverted, "the schema of %s does not read the object: %v", e2v(p.from), err)
	}
	if p.inTo, err = p.to.fields(p.uTo); err != nil {
		return unmapped(NotConverted, "the schema of %s does not read the object: %v", e2v(p.to), err)
	}
	return nil
}

// convert is where the API server puts p's leaves in the version kept, if
// they convert one to one.
func (m *serverMapper) convert(ctx context.Context, do Do, obj *Object, p plan) (*fieldpath.Set, error) {
	image, err := m.probe(ctx, do, obj, p.from, p.uFrom, p.leaves, p.to, p.inTo.nodes)
	if err != nil {
		return nil, err
	}
	switch {
	case image.Empty():
		return nil, unmapped(NotConverted, "a change to %s changes nothing in %s", first(p.leaves), e2v(p.to))
	case !image.Difference(p.inTo.leaves).Empty():
		return nil, unmapped(NotConverted, "a change to its fields adds or removes %s in %s", first(image.Difference(p.inTo.leaves)), e2v(p.to))
	case image.Equals(p.leaves):
		// Every field changed where it was, and only there.
		return image, nil
	}
	back, err := m.probe(ctx, do, obj, p.to, p.uTo, image, p.from, p.inFrom.nodes)
	if err != nil {
		return nil, err
	}
	if !back.Equals(p.leaves) {
		return nil, unmapped(NotConverted, "its fields and %s in %s do not convert one to one", first(image), e2v(p.to))
	}
	return image, nil
}

// placeNodes places p's list items, maps and keys: each stays where it is
// when the version kept has it there and some of the entry's fields are
// under it there.
func (p plan) placeNodes(image *fieldpath.Set) error {
	var lost fieldpath.Path
	p.nodes.Iterate(func(n fieldpath.Path) {
		holder := n
		if isKey(n) {
			holder = n[:len(n)-1]
		}
		if lost == nil && (!p.inTo.nodes.Has(n) || !hasUnder(image, holder)) {
			lost = n.Copy()
		}
	})
	if lost != nil {
		return unmapped(Unplaced, "no field it owns under %s is under it in %s", lost, e2v(p.to))
	}
	return nil
}

// probe sends a dry-run update of u (in version via) with the fields at
// changed changed and an observer in version obs owning observed, and
// returns what the observer lost.
func (m *serverMapper) probe(ctx context.Context, do Do, obj *Object, via *versionSchema, u *unstructured.Unstructured,
	changed *fieldpath.Set, obs *versionSchema, observed *fieldpath.Set) (*fieldpath.Set, error) {
	body, err := probeBody(u, via, changed, obs, observed)
	if err != nil {
		return nil, err
	}
	body.SetResourceVersion(obj.ResourceVersion)
	gvr := m.kept.GroupResource().WithVersion(via.gvk.Version)
	var answer *unstructured.Unstructured
	err = do.call(ctx, "dryrun", func(ctx context.Context) error {
		var err error
		answer, err = m.resource(gvr, obj.Namespace).Update(ctx, body, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}, FieldManager: m.fieldManager})
		return err
	})
	if err != nil {
		return nil, refusal(err)
	}
	for _, e := range answer.GetManagedFields() {
		if e.Manager == Observer && e.APIVersion == e2v(obs) {
			after, err := decode(e)
			if err != nil {
				return nil, err
			}
			return observed.Difference(after), nil
		}
	}
	// The field manager keeps the stored entries when it cannot convert.
	return nil, unmapped(NotConverted, "the API server did not convert the object to %s", e2v(obs))
}

// probeBody is u, an object of version via, with the fields at changed
// changed (to values via's schema allows), whose only managedFields entry
// is the observer.
func probeBody(u *unstructured.Unstructured, via *versionSchema, changed *fieldpath.Set, obs *versionSchema, observed *fieldpath.Set) (*unstructured.Unstructured, error) {
	body := u.DeepCopy()
	var failed error
	changed.Iterate(func(p fieldpath.Path) {
		if failed == nil {
			failed = change(body.Object, p, via.enum(p))
		}
	})
	if failed != nil {
		return nil, unmapped(Unplaced, "%v", failed)
	}
	raw, err := observed.ToJSON()
	if err != nil {
		return nil, err
	}
	now := metav1.Now()
	body.SetManagedFields([]metav1.ManagedFieldsEntry{{
		Manager: Observer, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: e2v(obs), Time: &now,
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: raw},
	}})
	return body, nil
}

// refusal is what a failed dry run means: the API server's refusal of the
// changed object leaves the entry where it is; a conflict, a missing
// object or trouble are the caller's.
func refusal(err error) error {
	switch {
	case apierrors.IsConflict(err), apierrors.IsNotFound(err), apierrors.IsGone(err):
		return err
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err), apierrors.IsForbidden(err),
		apierrors.IsMethodNotSupported(err), apierrors.IsUnsupportedMediaType(err):
		return unmapped(Refused, "the API server refused the dry run that converts it: %s", shorten(err.Error(), 300))
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Code == 500 && strings.Contains(err.Error(), "conversion webhook") {
		return unmapped(Refused, "the conversion webhook failed: %s", shorten(err.Error(), 300))
	}
	return err
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// e2v is a schema's apiVersion.
func e2v(vs *versionSchema) string { return vs.gvk.GroupVersion().String() }

// first is the first path of a non-empty set, to name in a message.
func first(s *fieldpath.Set) fieldpath.Path {
	var out fieldpath.Path
	s.Iterate(func(p fieldpath.Path) {
		if out == nil {
			out = p.Copy()
		}
	})
	return out
}
