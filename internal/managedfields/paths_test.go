package managedfields

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/value"
)

// object is a widget as JSON decodes it: numbers are int64 or float64, as
// unstructured objects hold them.
func object(t *testing.T) map[string]any {
	t.Helper()
	var o map[string]any
	if err := json.Unmarshal([]byte(`{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": {"name": "w", "labels": {"team": "a"}, "finalizers": ["example.com/f"]},
		"spec": {"color": "red-9", "paused": false, "ratio": 0.5, "selector": {"a": "b"},
		         "ports": [{"name": "http", "port": 80}], "tags": ["x", "y"], "args": ["a", "b"], "empty": []}
	}`), &o); err != nil {
		t.Fatal(err)
	}
	normalize(o)
	return o
}

// normalize turns JSON's whole float64s into int64s, as the API
// machinery's decoder does.
func normalize(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			v[k] = normalize(x)
		}
	case []any:
		for i, x := range v {
			v[i] = normalize(x)
		}
	case float64:
		if v == float64(int64(v)) {
			return int64(v)
		}
	}
	return v
}

func path(t *testing.T, s string) fieldpath.Path {
	t.Helper()
	var p fieldpath.Path
	set(t, s).Iterate(func(q fieldpath.Path) { p = q.Copy() })
	return p
}

func TestChange(t *testing.T) {
	tests := []struct {
		name, fields string
		// want is the value at the path afterwards; for a set item, the
		// list holding it.
		want    any
		at      string
		allowed []any // the schema's enum
		wantErr bool
	}{
		{name: "a string keeps its length and kinds of characters", fields: `{"f:spec":{"f:color":{}}}`, at: `{"f:spec":{"f:color":{}}}`, want: "red-8"},
		{name: "a bool flips", fields: `{"f:spec":{"f:paused":{}}}`, at: `{"f:spec":{"f:paused":{}}}`, want: true},
		{name: "an integer", fields: `{"f:spec":{"f:ports":{"k:{\"name\":\"http\"}":{"f:port":{}}}}}`, at: `{"f:spec":{"f:ports":{"k:{\"name\":\"http\"}":{"f:port":{}}}}}`, want: int64(81)},
		{name: "a number", fields: `{"f:spec":{"f:ratio":{}}}`, at: `{"f:spec":{"f:ratio":{}}}`, want: 1.5},
		{name: "an atomic map changes its first value", fields: `{"f:spec":{"f:selector":{}}}`, at: `{"f:spec":{"f:selector":{}}}`, want: map[string]any{"a": "c"}},
		{name: "an atomic list changes its first item", fields: `{"f:spec":{"f:args":{}}}`, at: `{"f:spec":{"f:args":{}}}`, want: []any{"b", "b"}},
		{name: "a set item takes a value the set does not hold", fields: `{"f:spec":{"f:tags":{"v:\"x\"":{}}}}`, at: `{"f:spec":{"f:tags":{}}}`, want: []any{"z", "y"}},
		{name: "an enum's value takes another the schema allows", fields: `{"f:spec":{"f:color":{}}}`, at: `{"f:spec":{"f:color":{}}}`,
			allowed: []any{"red-9", "blue"}, want: "blue"},
		{name: "an enum of numbers, as an OpenAPI document holds them", fields: `{"f:spec":{"f:ports":{"k:{\"name\":\"http\"}":{"f:port":{}}}}}`,
			at: `{"f:spec":{"f:ports":{"k:{\"name\":\"http\"}":{"f:port":{}}}}}`, allowed: []any{float64(80), float64(443)}, want: float64(443)},
		{name: "a set item takes an allowed value the set does not hold", fields: `{"f:spec":{"f:tags":{"v:\"x\"":{}}}}`, at: `{"f:spec":{"f:tags":{}}}`,
			allowed: []any{"x", "y", "w"}, want: []any{"w", "y"}},
		{name: "an enum of one value has no other", fields: `{"f:spec":{"f:color":{}}}`, allowed: []any{"red-9"}, wantErr: true},
		{name: "an empty list has nothing to change", fields: `{"f:spec":{"f:empty":{}}}`, wantErr: true},
		{name: "a field the object lacks", fields: `{"f:spec":{"f:size":{}}}`, wantErr: true},
		{name: "an item the object lacks", fields: `{"f:spec":{"f:ports":{"k:{\"name\":\"https\"}":{"f:port":{}}}}}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := object(t)
			err := change(o, path(t, tt.fields), tt.allowed)
			if (err != nil) != tt.wantErr {
				t.Fatalf("change = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			got, ok := at(o, path(t, tt.at))
			if !ok {
				t.Fatalf("nothing at %s after the change", tt.at)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("value (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNudge(t *testing.T) {
	for in, want := range map[string]string{
		"red": "ree", "zz": "zy", "ABC": "ABD", "v1.2.9": "v1.2.8", "2026-01-01T00:00:00Z": "2026-01-01T00:00:01Z", "my-app": "my-apq", "100m": "101m", "": "x", "--": "--x",
	} {
		if got := nudge(in); got != want {
			t.Errorf("nudge(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestIsIdentityAndIsKey(t *testing.T) {
	tests := []struct {
		fields        string
		identity, key bool
	}{
		{`{"f:metadata":{"f:finalizers":{"v:\"example.com/f\"":{}}}}`, true, false},
		{`{"f:metadata":{"f:labels":{}}}`, true, false},
		{`{"f:metadata":{"f:labels":{"f:team":{}}}}`, false, false},
		{`{"f:metadata":{"f:annotations":{"f:note":{}}}}`, false, false},
		{`{"f:apiVersion":{}}`, true, false},
		{`{"f:spec":{"f:color":{}}}`, false, false},
		{`{"f:spec":{"f:ports":{"k:{\"name\":\"http\"}":{"f:name":{}}}}}`, false, true},
		{`{"f:spec":{"f:ports":{"k:{\"name\":\"http\"}":{"f:port":{}}}}}`, false, false},
	}
	for _, tt := range tests {
		p := path(t, tt.fields)
		if got := isIdentity(p); got != tt.identity {
			t.Errorf("isIdentity(%s) = %v, want %v", p, got, tt.identity)
		}
		if got := isKey(p); got != tt.key {
			t.Errorf("isKey(%s) = %v, want %v", p, got, tt.key)
		}
	}
}

func TestNewFieldsOf(t *testing.T) {
	// A typed value's field set holds leaves and list items, not the maps
	// between them.
	in := fieldpath.NewSet(
		fieldpath.MakePathOrDie("spec", "color"),
		fieldpath.MakePathOrDie("spec", "ports", fieldpath.KeyByFields("name", "http")),
		fieldpath.MakePathOrDie("spec", "ports", fieldpath.KeyByFields("name", "http"), "name"),
		fieldpath.MakePathOrDie("spec", "ports", fieldpath.KeyByFields("name", "http"), "port"),
		fieldpath.MakePathOrDie("spec", "tags", value.NewValueInterface("x")),
	)
	f := newFieldsOf(in)
	wantLeaves := fieldpath.NewSet(
		fieldpath.MakePathOrDie("spec", "color"),
		fieldpath.MakePathOrDie("spec", "ports", fieldpath.KeyByFields("name", "http"), "name"),
		fieldpath.MakePathOrDie("spec", "ports", fieldpath.KeyByFields("name", "http"), "port"),
		fieldpath.MakePathOrDie("spec", "tags", value.NewValueInterface("x")),
	)
	if !f.leaves.Equals(wantLeaves) {
		t.Errorf("leaves:\n%s\nwant\n%s", f.leaves, wantLeaves)
	}
	wantNodes := wantLeaves.Union(fieldpath.NewSet(
		fieldpath.MakePathOrDie("spec"),
		fieldpath.MakePathOrDie("spec", "ports"),
		fieldpath.MakePathOrDie("spec", "ports", fieldpath.KeyByFields("name", "http")),
		fieldpath.MakePathOrDie("spec", "tags"),
	))
	if !f.nodes.Equals(wantNodes) {
		t.Errorf("nodes:\n%s\nwant\n%s", f.nodes, wantNodes)
	}
	if !hasUnder(f.nodes, fieldpath.MakePathOrDie("spec", "ports")) || hasUnder(f.nodes, fieldpath.MakePathOrDie("spec", "color")) {
		t.Error("hasUnder: a list holds its items, a leaf holds nothing")
	}
}
