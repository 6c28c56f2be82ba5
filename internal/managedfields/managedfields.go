// Package managedfields moves server-side apply's field ownership off an API
// version that is going away.
//
// Every entry of metadata.managedFields names the apiVersion its manager
// wrote with. Rewriting an object into a new storage version keeps those
// entries as they are, and once their version is no longer served the API
// server can no longer convert the object to it: every server-side apply on
// the object then fails ("request to convert CR to an invalid
// group/version"). Removing a version is safe only once no entry names it.
//
// Retarget makes an entry that names a retired version name the version
// that stays instead, with the same manager, operation, subresource and
// fields, so that every manager keeps what it owns. Given the object as
// read in the version that stays, it also checks every owned field is
// there: a field a conversion renamed or dropped cannot be owned in the
// new version, so it is dropped from the entry and counted, never kept
// under a path the object does not have. Without the object (for versions
// whose fields are known to be the same, as for a CRD without a conversion
// webhook) every field is kept.
//
// Two entries of the same manager may become one: entries of an Update are
// told apart by their apiVersion, so an Update made with the retired
// version and one made with the version that stays are merged, their
// fields united, the later time kept. Entries of an Apply never need it:
// the API server keeps one per manager and subresource, whatever version.
//
// The package is pure: it reads and returns values, and sends nothing.
package managedfields

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// Retarget says which apiVersions go and which one stays.
type Retarget struct {
	// Retired are the apiVersions (GROUP/VERSION, or VERSION for the core
	// group) that entries must stop naming.
	Retired []string
	// Target is the apiVersion they name instead: one the API server
	// serves and keeps serving.
	Target string
}

// Between is the Retarget that moves entries naming any of versions of
// group to target, another version of group; target itself is left out of
// the versions retired. ok is false when no version is left to retire.
func Between(group string, versions []string, target string) (rt Retarget, ok bool) {
	rt.Target = schema.GroupVersion{Group: group, Version: target}.String()
	for _, v := range versions {
		if v != target {
			rt.Retired = append(rt.Retired, schema.GroupVersion{Group: group, Version: v}.String())
		}
	}
	return rt, len(rt.Retired) > 0
}

// Result is what Apply did to one object's entries.
type Result struct {
	// Entries are the object's entries after the rewrite, in their order.
	Entries []metav1.ManagedFieldsEntry
	// Retargeted counts the entries that named a retired version.
	Retargeted int
	// Merged counts those that were merged into an entry of the same
	// manager that already named the target (or another retargeted one).
	Merged int
	// DroppedFields counts the owned fields that the object, as read in
	// the target version, does not have: ownership that cannot be kept.
	DroppedFields int
	// DroppedEntries counts the entries left owning nothing, removed.
	DroppedEntries int
}

// Changed reports whether the entries differ from the ones given.
func (r Result) Changed() bool { return r.Retargeted > 0 }

// Names reports whether any entry names a retired version.
func (rt Retarget) Names(entries []metav1.ManagedFieldsEntry) bool {
	return slices.ContainsFunc(entries, func(e metav1.ManagedFieldsEntry) bool {
		return slices.Contains(rt.Retired, e.APIVersion)
	})
}

// Apply rewrites entries. object is the whole object as read in the
// target version (an unstructured map, as runtime.Unstructured holds it),
// against which every owned field is checked; nil keeps every field.
// entries are not modified. An entry whose fields cannot be read is an
// error: nothing can be said of what it owns.
func (rt Retarget) Apply(entries []metav1.ManagedFieldsEntry, object map[string]any) (Result, error) {
	var res Result
	if !rt.Names(entries) {
		res.Entries = entries
		return res, nil
	}
	if slices.Contains(rt.Retired, rt.Target) {
		return res, fmt.Errorf("target version %s is one of the retired versions", rt.Target)
	}
	var out []slot
	index := map[string]int{}
	for _, e := range entries {
		s, err := rt.retarget(e, object, &res)
		if err != nil {
			return Result{}, err
		}
		key := identity(s.entry)
		if i, ok := index[key]; ok {
			// Only an entry that was retargeted can meet an entry of the
			// same identity: the API server keeps identities unique.
			if err := out[i].merge(s); err != nil {
				return Result{}, err
			}
			res.Merged++
			continue
		}
		index[key] = len(out)
		out = append(out, s)
	}
	for _, s := range out {
		if s.fields != nil && s.fields.Empty() {
			res.DroppedEntries++
			continue
		}
		e, err := s.encode()
		if err != nil {
			return Result{}, err
		}
		res.Entries = append(res.Entries, e)
	}
	return res, nil
}

// slot is an entry of the result: its fields are set once the entry was
// retargeted, checked or merged, and are then written back.
type slot struct {
	entry  metav1.ManagedFieldsEntry
	fields *fieldpath.Set
}

// retarget moves an entry that names a retired version to the target,
// keeping only the fields object has (all of them when object is nil); any
// other entry is kept as it is.
func (rt Retarget) retarget(e metav1.ManagedFieldsEntry, object map[string]any, res *Result) (slot, error) {
	if !slices.Contains(rt.Retired, e.APIVersion) {
		return slot{entry: e}, nil
	}
	res.Retargeted++
	e.APIVersion = rt.Target
	fields, err := decodeEntry(e)
	if err != nil || object == nil {
		return slot{entry: e, fields: fields}, err
	}
	kept := fieldpath.NewSet()
	for p := range fields.All() {
		if has(object, p) {
			kept.Insert(p)
		} else {
			res.DroppedFields++
		}
	}
	return slot{entry: e, fields: kept}, nil
}

// merge folds another entry of the same identity into s: the union of
// their fields, at the later time.
func (s *slot) merge(other slot) error {
	var err error
	if s.fields == nil {
		if s.fields, err = decodeEntry(s.entry); err != nil {
			return err
		}
	}
	if other.fields == nil {
		if other.fields, err = decodeEntry(other.entry); err != nil {
			return err
		}
	}
	s.fields = s.fields.Union(other.fields)
	if later(other.entry.Time, s.entry.Time) {
		s.entry.Time = other.entry.Time
	}
	return nil
}

// encode writes s's fields, if it holds them, back into its entry.
func (s slot) encode() (metav1.ManagedFieldsEntry, error) {
	if s.fields == nil {
		return s.entry, nil
	}
	raw, err := s.fields.ToJSON()
	if err != nil {
		return metav1.ManagedFieldsEntry{}, fmt.Errorf("encode fields of %s: %w", s.entry.Manager, err)
	}
	s.entry.FieldsType = "FieldsV1"
	s.entry.FieldsV1 = &metav1.FieldsV1{Raw: raw}
	return s.entry, nil
}

// decodeEntry reads the fields of e, naming the entry when it cannot.
func decodeEntry(e metav1.ManagedFieldsEntry) (*fieldpath.Set, error) {
	fields, err := decode(e)
	if err != nil {
		return nil, fmt.Errorf("managedFields entry of %s (%s): %w", e.Manager, e.Operation, err)
	}
	return fields, nil
}

// Patch is the JSON merge patch that sets an object's managedFields to
// entries, guarded by uid and resourceVersion: the API server refuses it
// with a conflict if the object changed since it was read.
//
// An empty list in a write means "keep the stored entries" to the API
// server; a list of one empty entry is how a write clears them.
func Patch(uid, resourceVersion string, entries []metav1.ManagedFieldsEntry) ([]byte, error) {
	var list any = entries
	if len(entries) == 0 {
		list = []map[string]any{{}}
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":             uid,
		"resourceVersion": resourceVersion,
		"managedFields":   list,
	}})
}

func decode(e metav1.ManagedFieldsEntry) (*fieldpath.Set, error) {
	s := fieldpath.NewSet()
	if e.FieldsV1 == nil || len(e.FieldsV1.Raw) == 0 {
		return s, nil
	}
	if e.FieldsType != "" && e.FieldsType != "FieldsV1" {
		return nil, fmt.Errorf("fields of type %q cannot be read", e.FieldsType)
	}
	if err := s.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
		return nil, fmt.Errorf("read fields: %w", err)
	}
	return s, nil
}

// identity is the API server's key for an entry: manager, operation and
// subresource, and the apiVersion too for an Update.
func identity(e metav1.ManagedFieldsEntry) string {
	version := e.APIVersion
	if e.Operation == metav1.ManagedFieldsOperationApply {
		version = ""
	}
	return fmt.Sprintf("%q %q %q %q", e.Manager, e.Operation, e.Subresource, version)
}

func later(a, b *metav1.Time) bool {
	return a != nil && (b == nil || a.After(b.Time))
}

// has reports whether object has the field at p.
func has(object any, p fieldpath.Path) bool {
	cur := object
	for _, pe := range p {
		switch {
		case pe.FieldName != nil:
			m, ok := cur.(map[string]any)
			if !ok {
				return false
			}
			if cur, ok = m[*pe.FieldName]; !ok {
				return false
			}
		case pe.Key != nil:
			l, ok := cur.([]any)
			if !ok {
				return false
			}
			i := slices.IndexFunc(l, func(item any) bool {
				m, ok := item.(map[string]any)
				if !ok {
					return false
				}
				for _, f := range *pe.Key {
					v, ok := m[f.Name]
					if !ok || !value.Equals(value.NewValueInterface(v), f.Value) {
						return false
					}
				}
				return true
			})
			if i < 0 {
				return false
			}
			cur = l[i]
		case pe.Value != nil:
			l, ok := cur.([]any)
			if !ok {
				return false
			}
			i := slices.IndexFunc(l, func(item any) bool { return value.Equals(value.NewValueInterface(item), *pe.Value) })
			if i < 0 {
				return false
			}
			cur = l[i]
		case pe.Index != nil:
			l, ok := cur.([]any)
			if !ok || *pe.Index < 0 || *pe.Index >= len(l) {
				return false
			}
			cur = l[*pe.Index]
		default:
			return false
		}
	}
	return true
}
