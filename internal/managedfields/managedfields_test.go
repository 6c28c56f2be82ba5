package managedfields

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
)

// object is a widget as read in the target version: spec.color,
// spec.size, a label, and an associative list of ports keyed by name.
func object() map[string]any {
	var o map[string]any
	if err := json.Unmarshal([]byte(`{
		"apiVersion": "example.com/v2", "kind": "Widget",
		"metadata": {"name": "w", "labels": {"team": "a"}},
		"spec": {"color": "red", "size": 3, "ports": [{"name": "http", "port": 80}], "tags": ["x", "y"], "list": [1, 2]}
	}`), &o); err != nil {
		panic(err)
	}
	return o
}

func TestApply(t *testing.T) {
	rt := Retarget{Retired: []string{"example.com/v1"}, Target: "example.com/v2"}
	tests := []struct {
		name    string
		entries []metav1.ManagedFieldsEntry
		object  map[string]any
		want    []metav1.ManagedFieldsEntry
		counts  Result // Entries ignored
	}{{
		name:    "nothing names a retired version",
		entries: []metav1.ManagedFieldsEntry{entry("a", apply, "example.com/v2", `{"f:spec":{"f:color":{}}}`, 1)},
		want:    []metav1.ManagedFieldsEntry{entry("a", apply, "example.com/v2", `{"f:spec":{"f:color":{}}}`, 1)},
	}, {
		name: "each manager keeps its fields under the target",
		entries: []metav1.ManagedFieldsEntry{
			entry("a", apply, "example.com/v1", `{"f:spec":{"f:color":{}}}`, 1),
			entry("b", apply, "example.com/v1", `{"f:spec":{"f:size":{}}}`, 2),
			entry("c", update, "example.com/v2", `{"f:metadata":{"f:labels":{".":{},"f:team":{}}}}`, 3),
		},
		object: object(),
		want: []metav1.ManagedFieldsEntry{
			entry("a", apply, "example.com/v2", `{"f:spec":{"f:color":{}}}`, 1),
			entry("b", apply, "example.com/v2", `{"f:spec":{"f:size":{}}}`, 2),
			entry("c", update, "example.com/v2", `{"f:metadata":{"f:labels":{".":{},"f:team":{}}}}`, 3),
		},
		counts: Result{Retargeted: 2},
	}, {
		name: "keys, set values and indices that the object has are kept",
		entries: []metav1.ManagedFieldsEntry{
			entry("a", apply, "example.com/v1", `{"f:spec":{"f:ports":{"k:{\"name\":\"http\"}":{".":{},"f:port":{}}},"f:tags":{"v:\"x\"":{}},"f:list":{"i:1":{}}}}`, 1),
		},
		object: object(),
		want: []metav1.ManagedFieldsEntry{
			entry("a", apply, "example.com/v2", `{"f:spec":{"f:list":{"i:1":{}},"f:ports":{"k:{\"name\":\"http\"}":{".":{},"f:port":{}}},"f:tags":{"v:\"x\"":{}}}}`, 1),
		},
		counts: Result{Retargeted: 1},
	}, {
		name: "fields the target version lacks are dropped and counted",
		entries: []metav1.ManagedFieldsEntry{
			entry("a", apply, "example.com/v1", `{"f:spec":{"f:colour":{},"f:size":{},"f:ports":{"k:{\"name\":\"https\"}":{}},"f:tags":{"v:\"z\"":{}},"f:list":{"i:5":{}}}}`, 1),
			entry("b", update, "example.com/v1", `{"f:spec":{"f:shape":{}}}`, 2),
		},
		object: object(),
		want: []metav1.ManagedFieldsEntry{
			entry("a", apply, "example.com/v2", `{"f:spec":{"f:size":{}}}`, 1),
		},
		counts: Result{Retargeted: 2, DroppedFields: 5, DroppedEntries: 1},
	}, {
		name: "without the object every field is kept",
		entries: []metav1.ManagedFieldsEntry{
			entry("a", apply, "example.com/v1", `{"f:spec":{"f:colour":{}}}`, 1),
		},
		want: []metav1.ManagedFieldsEntry{
			entry("a", apply, "example.com/v2", `{"f:spec":{"f:colour":{}}}`, 1),
		},
		counts: Result{Retargeted: 1},
	}, {
		name: "an update made with both versions becomes one entry, with the later time",
		entries: []metav1.ManagedFieldsEntry{
			entry("edit", update, "example.com/v2", `{"f:spec":{"f:color":{}}}`, 5),
			entry("edit", update, "example.com/v1", `{"f:spec":{"f:size":{}}}`, 7),
			entry("edit", update, "example.com/v2", `{"f:status":{"f:ok":{}}}`, 1),
		},
		want: []metav1.ManagedFieldsEntry{
			entry("edit", update, "example.com/v2", `{"f:spec":{"f:color":{},"f:size":{}}}`, 7),
			entry("edit", update, "example.com/v2", `{"f:status":{"f:ok":{}}}`, 1),
		},
		counts: Result{Retargeted: 1, Merged: 1},
	}}
	// The third entry of the last case differs by subresource.
	tests[len(tests)-1].entries[2].Subresource = "status"
	tests[len(tests)-1].want[1].Subresource = "status"

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := clone(tt.entries)
			got, err := rt.Apply(tt.entries, tt.object)
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
			if got.Changed() != (tt.counts.Retargeted > 0) {
				t.Errorf("Changed() = %v", got.Changed())
			}
			if diff := cmp.Diff(before, tt.entries); diff != "" {
				t.Errorf("Apply modified its input (-before +after):\n%s", diff)
			}
		})
	}
}

func TestApplyErrors(t *testing.T) {
	rt := Retarget{Retired: []string{"example.com/v1"}, Target: "example.com/v2"}
	bad := entry("a", apply, "example.com/v1", `{"f:spec":`, 1)
	if _, err := rt.Apply([]metav1.ManagedFieldsEntry{bad}, nil); err == nil {
		t.Error("unreadable fields: no error")
	}
	self := Retarget{Retired: []string{"example.com/v1", "example.com/v2"}, Target: "example.com/v2"}
	if _, err := self.Apply([]metav1.ManagedFieldsEntry{entry("a", apply, "example.com/v1", `{}`, 1)}, nil); err == nil {
		t.Error("target among the retired versions: no error")
	}
}

func TestPatch(t *testing.T) {
	tests := []struct {
		name    string
		entries []metav1.ManagedFieldsEntry
		want    string
	}{{
		name:    "entries",
		entries: []metav1.ManagedFieldsEntry{{Manager: "a", Operation: apply, APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{}}`)}}},
		want:    `{"metadata":{"managedFields":[{"manager":"a","operation":"Apply","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:data":{}}}],"resourceVersion":"42","uid":"u"}}`,
	}, {
		name: "none left clears them with one empty entry",
		want: `{"metadata":{"managedFields":[{}],"resourceVersion":"42","uid":"u"}}`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Patch("u", "42", tt.entries)
			if err != nil {
				t.Fatal(err)
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
