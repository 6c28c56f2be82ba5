package managedfields

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

func entry(manager string, op metav1.ManagedFieldsOperationType, version, fields string, at int) metav1.ManagedFieldsEntry {
	t := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, at, 0, time.UTC))
	return metav1.ManagedFieldsEntry{
		Manager: manager, Operation: op, APIVersion: version, Time: &t,
		FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)},
	}
}

const (
	apply  = metav1.ManagedFieldsOperationApply
	update = metav1.ManagedFieldsOperationUpdate
	v1     = "example.com/v1"
	v2     = "example.com/v2"
)

// set reads fields as an entry holds them.
func set(t *testing.T, fields string) *fieldpath.Set {
	t.Helper()
	s := fieldpath.NewSet()
	if err := s.FromJSON(bytes.NewReader([]byte(fields))); err != nil {
		t.Fatal(err)
	}
	return s
}

// placing is a PlaceFunc that answers, by manager, with the fields given
// (JSON) or with an *Unmapped; a manager it does not know keeps its fields.
type placing map[string]any

func (p placing) place(t *testing.T) PlaceFunc {
	return func(e metav1.ManagedFieldsEntry, fields *fieldpath.Set) (*fieldpath.Set, error) {
		switch a := p[e.Manager].(type) {
		case string:
			return set(t, a), nil
		case error:
			return nil, a
		}
		return fields, nil
	}
}

func TestMove(t *testing.T) {
	rt := Retarget{Retired: []string{v1}, Target: v2}
	statusEntry := func(e metav1.ManagedFieldsEntry) metav1.ManagedFieldsEntry { e.Subresource = "status"; return e }
	tests := []struct {
		name    string
		entries []metav1.ManagedFieldsEntry
		place   placing
		want    []metav1.ManagedFieldsEntry
		counts  Result // Entries ignored
	}{{
		name:    "nothing names a retired version",
		entries: []metav1.ManagedFieldsEntry{entry("a", apply, v2, `{"f:spec":{"f:color":{}}}`, 1)},
		want:    []metav1.ManagedFieldsEntry{entry("a", apply, v2, `{"f:spec":{"f:color":{}}}`, 1)},
	}, {
		name: "each manager keeps its fields, where the version kept has them",
		entries: []metav1.ManagedFieldsEntry{
			entry("a", apply, v1, `{"f:spec":{"f:replicas":{}}}`, 1),
			entry("b", apply, v1, `{"f:spec":{"f:size":{}}}`, 2),
			entry("c", update, v2, `{"f:metadata":{"f:labels":{".":{},"f:team":{}}}}`, 3),
		},
		place: placing{"a": `{"f:spec":{"f:scale":{"f:replicas":{}}}}`},
		want: []metav1.ManagedFieldsEntry{
			entry("a", apply, v2, `{"f:spec":{"f:scale":{"f:replicas":{}}}}`, 1),
			entry("b", apply, v2, `{"f:spec":{"f:size":{}}}`, 2),
			entry("c", update, v2, `{"f:metadata":{"f:labels":{".":{},"f:team":{}}}}`, 3),
		},
		counts: Result{Moved: 2},
	}, {
		name: "an entry whose fields cannot be placed stays whole, naming its version, and is said why",
		entries: []metav1.ManagedFieldsEntry{
			entry("a", apply, v1, `{"f:spec":{"f:replicas":{},"f:color":{}}}`, 1),
			entry("b", update, v1, `{"f:spec":{"f:size":{}}}`, 2),
		},
		place: placing{"a": unmapped(NotConverted, "spec.color has no image")},
		want: []metav1.ManagedFieldsEntry{
			entry("a", apply, v1, `{"f:spec":{"f:replicas":{},"f:color":{}}}`, 1),
			entry("b", update, v2, `{"f:spec":{"f:size":{}}}`, 2),
		},
		counts: Result{Moved: 1, Left: []Left{{Manager: "a", Operation: apply, APIVersion: v1, Reason: NotConverted, Message: "spec.color has no image"}}},
	}, {
		name: "no entry can be placed: every entry stays, none is emptied",
		entries: []metav1.ManagedFieldsEntry{
			entry("a", apply, v1, `{"f:spec":{"f:replicas":{}}}`, 1),
			statusEntry(entry("b", update, v1, `{"f:status":{"f:ok":{}}}`, 2)),
		},
		place: placing{"a": unmapped(Refused, "denied"), "b": unmapped(NotInVersion, "no status.ok")},
		want: []metav1.ManagedFieldsEntry{
			entry("a", apply, v1, `{"f:spec":{"f:replicas":{}}}`, 1),
			statusEntry(entry("b", update, v1, `{"f:status":{"f:ok":{}}}`, 2)),
		},
		counts: Result{Left: []Left{
			{Manager: "a", Operation: apply, APIVersion: v1, Reason: Refused, Message: "denied"},
			{Manager: "b", Operation: update, Subresource: "status", APIVersion: v1, Reason: NotInVersion, Message: "no status.ok"},
		}},
	}, {
		name: "an Update in each version becomes one, at the later time",
		entries: []metav1.ManagedFieldsEntry{
			entry("edit", update, v2, `{"f:spec":{"f:color":{}}}`, 7),
			entry("edit", update, v1, `{"f:spec":{"f:replicas":{}}}`, 5),
			statusEntry(entry("edit", update, v2, `{"f:status":{"f:ok":{}}}`, 1)),
		},
		place: placing{"edit": `{"f:spec":{"f:scale":{"f:replicas":{}}}}`},
		want: []metav1.ManagedFieldsEntry{
			entry("edit", update, v2, `{"f:spec":{"f:color":{},"f:scale":{"f:replicas":{}}}}`, 7),
			statusEntry(entry("edit", update, v2, `{"f:status":{"f:ok":{}}}`, 1)),
		},
		counts: Result{Moved: 1, Merged: 1},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := clone(tt.entries)
			got, err := rt.Move(tt.entries, tt.place.place(t))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got.Entries); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
			got.Entries = nil
			if diff := cmp.Diff(tt.counts, got); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
			if got.Changed() != (tt.counts.Moved > 0) {
				t.Errorf("Changed() = %v", got.Changed())
			}
			if diff := cmp.Diff(before, tt.entries); diff != "" {
				t.Errorf("Move modified its input (-before +after):\n%s", diff)
			}
		})
	}
}

func TestMoveErrors(t *testing.T) {
	rt := Retarget{Retired: []string{v1}, Target: v2}
	keep := func(_ metav1.ManagedFieldsEntry, f *fieldpath.Set) (*fieldpath.Set, error) { return f, nil }
	if _, err := rt.Move([]metav1.ManagedFieldsEntry{entry("a", apply, v1, `{"f:spec":`, 1)}, keep); err == nil {
		t.Error("unreadable fields: no error")
	}
	self := Retarget{Retired: []string{v1, v2}, Target: v2}
	if _, err := self.Move([]metav1.ManagedFieldsEntry{entry("a", apply, v1, `{}`, 1)}, keep); err == nil {
		t.Error("target among the retired versions: no error")
	}
	// Trouble placing an entry (a request failed, the object changed)
	// stops the move: nothing is written from half an answer.
	trouble := errors.New("conflict")
	_, err := rt.Move([]metav1.ManagedFieldsEntry{entry("a", apply, v1, `{}`, 1)}, func(metav1.ManagedFieldsEntry, *fieldpath.Set) (*fieldpath.Set, error) {
		return nil, trouble
	})
	if !errors.Is(err, trouble) {
		t.Errorf("Move = %v, want the placing's error", err)
	}
}

func TestPatch(t *testing.T) {
	tests := []struct {
		name    string
		entries []metav1.ManagedFieldsEntry
		want    string
		err     error
	}{{
		name:    "entries",
		entries: []metav1.ManagedFieldsEntry{{Manager: "a", Operation: apply, APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{}}`)}}},
		want:    `{"metadata":{"managedFields":[{"manager":"a","operation":"Apply","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:data":{}}}],"resourceVersion":"42","uid":"u"}}`,
	}, {
		// An empty list keeps the stored entries; [{}] clears them, and
		// the next apply co-owns every field as "before-first-apply".
		name: "no entry is refused, never sent as [{}]",
		err:  ErrNoEntries,
	}, {
		name:    "an empty entry is refused",
		entries: []metav1.ManagedFieldsEntry{{}},
		err:     ErrNoEntries,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Patch("u", "42", tt.entries)
			if !errors.Is(err, tt.err) {
				t.Fatalf("Patch error = %v, want %v", err, tt.err)
			}
			if string(got) != tt.want {
				t.Errorf("Patch =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func clone(in []metav1.ManagedFieldsEntry) []metav1.ManagedFieldsEntry {
	out := make([]metav1.ManagedFieldsEntry, len(in))
	for i, e := range in {
		out[i] = *e.DeepCopy()
	}
	return out
}

func TestBetween(t *testing.T) {
	rt, ok := Between("example.com", []string{"v1", "v2", "v1beta1"}, "v2")
	want := Retarget{Retired: []string{"example.com/v1", "example.com/v1beta1"}, Target: "example.com/v2"}
	if !ok || !cmp.Equal(want, rt) {
		t.Errorf("Between = %+v, %v; want %+v, true", rt, ok, want)
	}
	if rt, ok := Between("", []string{"v1"}, "v1"); ok || rt.Target != "v1" {
		t.Errorf("only the target: %+v, %v; want nothing to retire", rt, ok)
	}
}
