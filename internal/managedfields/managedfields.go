// Package managedfields moves server-side apply's field ownership off an API
// version that is going away, without a manager losing a field that exists.
//
// Every entry of metadata.managedFields names the apiVersion its manager
// wrote with. Rewriting an object into a new storage version keeps those
// entries as they are, and once their version is no longer served the API
// server can no longer convert the object to it: every server-side apply on
// the object then fails ("request to convert CR to an invalid
// group/version"). Removing a version is safe only once no entry names it.
//
// A Mover makes an entry that names a retired version name the version
// kept instead, with the same manager, operation, subresource and time,
// and with its fields as the kept version has them. Where they are is the
// Mapper's to say, and it never guesses from a path being the same:
//
//   - A custom resource whose CRD converts through a webhook: the API
//     server converts (see serverMapper), in dry-run updates that the
//     field manager answers with what changed in the version kept.
//   - A CRD without a webhook converts nothing but apiVersion: a field
//     stays where it is, if the kept version's schema (its OpenAPI v3
//     document) has it. The schema decides, not the object: a field an
//     apply owns at a zero value that JSON omits is still the apply's.
//   - A built-in resource's versions may not keep a field's path across
//     Kubernetes' own conversions (autoscaling/v1 keeps v2's spec.behavior
//     in an annotation): a field stays where it is only where the kept
//     version's schema has it and the API server shows, in a dry-run
//     update, that the conversion keeps it there (see builtinMapper);
//     an entry with a field it puts elsewhere is left (NotConverted).
//
// An entry moves whole or stays whole: the API server keeps one Apply
// entry per manager and subresource whatever its apiVersion, so half an
// entry cannot stay behind. One whose fields cannot be placed is left as it
// is, naming the retired version, and reported with its reason (Left);
// nothing is dropped. Two entries of the same manager may become one:
// entries of an Update are told apart by their apiVersion too, so an Update
// made with the retired version and one made with the version kept are
// merged, their fields united, the later time kept.
//
// The rule (Retarget.Move) is pure; the Mappers read what they need from
// the API server and send nothing that it stores.
package managedfields

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
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

// Names reports whether any entry names a retired version.
func (rt Retarget) Names(entries []metav1.ManagedFieldsEntry) bool {
	return slices.ContainsFunc(entries, func(e metav1.ManagedFieldsEntry) bool {
		return slices.Contains(rt.Retired, e.APIVersion)
	})
}

// Leave lists the entries that name a retired version as left, each for
// reason and with message: what is said of an object none of whose
// entries could be moved.
func (rt Retarget) Leave(entries []metav1.ManagedFieldsEntry, reason Reason, message string) []Left {
	var left []Left
	for _, e := range entries {
		if slices.Contains(rt.Retired, e.APIVersion) {
			left = append(left, Left{
				Manager: e.Manager, Operation: e.Operation, Subresource: e.Subresource, APIVersion: e.APIVersion,
				Reason: reason, Message: message,
			})
		}
	}
	return left
}

// Reason says why an entry was left naming a retired version.
type Reason string

// The reasons an entry's fields cannot be placed in the version kept.
const (
	// NotInVersion: the version kept has no such field (its schema says).
	NotInVersion Reason = "NotInVersion"
	// NotServed: the version the entry names is not served, and the API
	// server cannot convert from it.
	NotServed Reason = "NotServed"
	// NotConverted: the conversion does not carry the entry's fields one
	// to one to the version kept (it drops, merges or restructures them).
	NotConverted Reason = "NotConverted"
	// Refused: the API server refused the dry run that converts them
	// (validation refusing the changed values, an admission webhook with
	// side effects, a conversion webhook's error).
	Refused Reason = "Refused"
	// Unplaced: the entry owns a field the object does not have, or a
	// list item, map or key none of whose fields it owns: no change to
	// the object shows where it is in the version kept.
	Unplaced Reason = "Unplaced"
	// Denied: an admission webhook or policy refused the write that
	// moves them. The object may still have been re-stored through its
	// status subresource, whose writes keep the stored entries.
	Denied Reason = "Denied"
)

// Unmapped is a Mapper's answer for an entry whose fields cannot be
// placed in the version kept: the entry is left as it is.
type Unmapped struct {
	Reason  Reason
	Message string
}

func (u *Unmapped) Error() string { return string(u.Reason) + ": " + u.Message }

func unmapped(reason Reason, format string, args ...any) *Unmapped {
	return &Unmapped{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// Left is an entry left naming a retired version, and why.
type Left struct {
	Manager     string
	Operation   metav1.ManagedFieldsOperationType
	Subresource string
	APIVersion  string
	Reason      Reason
	Message     string
}

// Result is what Move did to one object's entries.
type Result struct {
	// Entries are the object's entries after the move, in their order.
	// They are never empty when the entries given were not.
	Entries []metav1.ManagedFieldsEntry
	// Moved counts the entries that named a retired version and now name
	// the target.
	Moved int
	// Merged counts those that were merged into an entry of the same
	// manager that already named the target (or another moved one).
	Merged int
	// Left are the entries that still name a retired version.
	Left []Left
}

// Changed reports whether the entries differ from the ones given.
func (r Result) Changed() bool { return r.Moved > 0 }

// PlaceFunc says where the fields of e, an entry naming a retired version,
// are in the target version: an *Unmapped when they cannot be placed, any
// other error when the move must stop (the object changed, a request
// failed).
type PlaceFunc func(e metav1.ManagedFieldsEntry, fields *fieldpath.Set) (*fieldpath.Set, error)

// Move moves every entry that names a retired version to the target, with
// its fields where place says they are; an entry place cannot place stays
// as it is, in Result.Left. entries are not modified. An entry whose
// fields cannot be read is an error: nothing can be said of what it owns.
func (rt Retarget) Move(entries []metav1.ManagedFieldsEntry, place PlaceFunc) (Result, error) {
	if !rt.Names(entries) {
		return Result{Entries: entries}, nil
	}
	if slices.Contains(rt.Retired, rt.Target) {
		return Result{}, fmt.Errorf("target version %s is one of the retired versions", rt.Target)
	}
	var res Result
	var out []slot
	index := map[string]int{}
	for _, e := range entries {
		s, err := rt.move(e, place, &res)
		if err != nil {
			return Result{}, err
		}
		key := identity(s.entry)
		if i, ok := index[key]; ok {
			// Only an entry that was moved can meet an entry of the same
			// identity: the API server keeps identities unique.
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
		e, err := s.encode()
		if err != nil {
			return Result{}, err
		}
		res.Entries = append(res.Entries, e)
	}
	return res, nil
}

// slot is an entry of the result: its fields are set once the entry was
// moved or merged, and are then written back.
type slot struct {
	entry  metav1.ManagedFieldsEntry
	fields *fieldpath.Set
}

// move moves an entry that names a retired version to the target, with
// its fields where place puts them, or leaves it as it is; any other
// entry is kept as it is.
func (rt Retarget) move(e metav1.ManagedFieldsEntry, place PlaceFunc, res *Result) (slot, error) {
	if !slices.Contains(rt.Retired, e.APIVersion) {
		return slot{entry: e}, nil
	}
	fields, err := decodeEntry(e)
	if err != nil {
		return slot{}, err
	}
	placed, err := place(e, fields)
	var u *Unmapped
	switch {
	case errors.As(err, &u):
		res.Left = append(res.Left, Left{
			Manager: e.Manager, Operation: e.Operation, Subresource: e.Subresource, APIVersion: e.APIVersion,
			Reason: u.Reason, Message: u.Message,
		})
		return slot{entry: e}, nil
	case err != nil:
		return slot{}, err
	}
	res.Moved++
	e.APIVersion = rt.Target
	return slot{entry: e, fields: placed}, nil
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

// ErrNoEntries is Patch's refusal to write an empty list of entries.
var ErrNoEntries = errors.New("no managedFields entries to write")

// Patch is the JSON merge patch that sets an object's managedFields to
// entries, guarded by uid and resourceVersion: the API server refuses it
// with a conflict if the object changed since it was read.
//
// It refuses an empty list (ErrNoEntries): the API server takes an empty
// list as "keep the stored entries" and a list of one empty entry as
// "clear them", and a cleared object's next server-side apply records a
// "before-first-apply" entry that co-owns every field. Move never empties
// a list.
func Patch(uid, resourceVersion string, entries []metav1.ManagedFieldsEntry) ([]byte, error) {
	if len(entries) == 0 || slices.ContainsFunc(entries, isEmpty) {
		return nil, ErrNoEntries
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":             uid,
		"resourceVersion": resourceVersion,
		"managedFields":   entries,
	}})
}

func isEmpty(e metav1.ManagedFieldsEntry) bool {
	return e.Manager == "" && e.Operation == "" && e.APIVersion == "" && e.FieldsV1 == nil
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
