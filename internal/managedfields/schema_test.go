package managedfields

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// widgetModels are the schemas of an OpenAPI v3 document of example.com/v2
// as the API server serves a CRD's: its top-level schema marked with its
// group, version and kind, and ObjectMeta by reference.
const widgetModels = `{
  "com.example.v2.Widget": {
    "type": "object",
    "x-kubernetes-group-version-kind": [{"group": "example.com", "version": "v2", "kind": "Widget"}],
    "properties": {
      "apiVersion": {"type": "string"},
      "kind": {"type": "string"},
      "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
      "spec": {"type": "object", "properties": {
        "paused": {"type": "boolean"},
        "mode": {"type": "string", "enum": ["Fast", "Slow"]},
        "scale": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
        "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                  "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}},
        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        "args": {"type": "array", "items": {"type": "string"}},
        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
      }}
    }
  },
  "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {
    "type": "object",
    "properties": {
      "name": {"type": "string"},
      "labels": {"type": "object", "additionalProperties": {"type": "string"}}
    }
  }
}`

func widgetSchema(t *testing.T) *versionSchema {
	t.Helper()
	var models map[string]*spec.Schema
	if err := json.Unmarshal([]byte(widgetModels), &models); err != nil {
		t.Fatal(err)
	}
	vs, err := newVersionSchema(models, schema.GroupVersionKind{Group: "example.com", Version: "v2", Kind: "Widget"})
	if err != nil || vs == nil {
		t.Fatalf("newVersionSchema = %v, %v", vs, err)
	}
	return vs
}

func TestSchemaHas(t *testing.T) {
	vs := widgetSchema(t)
	tests := []struct {
		fields string
		want   bool
	}{
		// A field an apply owns at a zero value that JSON omits is there:
		// the schema says so, whatever the object holds.
		{`{"f:spec":{"f:paused":{}}}`, true},
		{`{"f:spec":{"f:scale":{"f:replicas":{}}}}`, true},
		{`{"f:spec":{"f:ports":{"k:{\"name\":\"http\"}":{".":{},"f:port":{}}}}}`, true},
		{`{"f:spec":{"f:tags":{"v:\"x\"":{}}}}`, true},
		{`{"f:spec":{"f:args":{}}}`, true},
		{`{"f:spec":{"f:extra":{"f:anything":{"f:below":{}}}}}`, true},
		{`{"f:metadata":{"f:labels":{".":{},"f:team":{}}}}`, true},
		{`{"f:spec":{"f:replicas":{}}}`, false},
		{`{"f:spec":{"f:scale":{"f:max":{}}}}`, false},
		{`{"f:spec":{"f:ports":{"k:{\"port\":80}":{}}}}`, false},
		{`{"f:spec":{"f:args":{"v:\"a\"":{}}}}`, false},
		{`{"f:status":{}}`, false},
	}
	for _, tt := range tests {
		set(t, tt.fields).Iterate(func(p fieldpath.Path) {
			if got := vs.has(p); got != tt.want {
				t.Errorf("has(%s) = %v, want %v", p, got, tt.want)
			}
		})
	}
}

func TestSchemaEnum(t *testing.T) {
	vs := widgetSchema(t)
	tests := []struct {
		fields string
		want   []any
	}{
		{`{"f:spec":{"f:mode":{}}}`, []any{"Fast", "Slow"}},
		{`{"f:spec":{"f:paused":{}}}`, nil},
		{`{"f:spec":{"f:ports":{"k:{\"name\":\"http\"}":{"f:port":{}}}}}`, nil},
		{`{"f:metadata":{"f:labels":{"f:team":{}}}}`, nil},
		{`{"f:spec":{"f:nothing":{}}}`, nil},
	}
	for _, tt := range tests {
		p := path(t, tt.fields)
		if diff := cmp.Diff(tt.want, vs.enum(p)); diff != "" {
			t.Errorf("enum(%s) (-want +got):\n%s", p, diff)
		}
	}
}

func TestSchemaMapperPlace(t *testing.T) {
	m := schemaMapper{kept: widgetSchema(t)}
	tests := []struct {
		name, fields string
		want         *Unmapped
	}{
		{name: "every field is in the version kept", fields: `{"f:metadata":{"f:labels":{"f:team":{}}},"f:spec":{"f:paused":{}}}`},
		{name: "one is not: the entry stays", fields: `{"f:spec":{"f:paused":{},"f:replicas":{}}}`,
			want: &Unmapped{Reason: NotInVersion, Message: "example.com/v2 has no field .spec.replicas"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fields := set(t, tt.fields)
			got, err := m.Place(context.Background(), nil, nil, metav1.ManagedFieldsEntry{}, fields)
			var u *Unmapped
			errors.As(err, &u)
			if diff := cmp.Diff(tt.want, u); diff != "" {
				t.Fatalf("Place (-want +got):\n%s", diff)
			}
			if tt.want == nil && !got.Equals(fields) {
				t.Errorf("Place = %s, want the fields where they are", got)
			}
		})
	}
}

func TestVersionSchemaFields(t *testing.T) {
	vs := widgetSchema(t)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v2", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "labels": map[string]any{"team": "a"}},
		"spec": map[string]any{
			"scale": map[string]any{"replicas": int64(3)},
			"ports": []any{map[string]any{"name": "http", "port": int64(80)}},
			"args":  []any{"a"},
		},
	}}
	f, err := vs.fields(u)
	if err != nil {
		t.Fatal(err)
	}
	leaves := []string{
		`{"f:spec":{"f:scale":{"f:replicas":{}}}}`,
		`{"f:spec":{"f:ports":{"k:{\"name\":\"http\"}":{"f:port":{}}}}}`,
		`{"f:spec":{"f:args":{}}}`,
		`{"f:metadata":{"f:labels":{"f:team":{}}}}`,
	}
	for _, l := range leaves {
		p := path(t, l)
		if !f.leaves.Has(p) {
			t.Errorf("%s is not a leaf: %s", p, f.leaves)
		}
	}
	for _, n := range []string{`{"f:spec":{"f:ports":{"k:{\"name\":\"http\"}":{}}}}`, `{"f:metadata":{"f:labels":{}}}`, `{"f:spec":{}}`} {
		p := path(t, n)
		if !f.nodes.Has(p) || f.leaves.Has(p) {
			t.Errorf("%s is not a node holding fields", p)
		}
	}
}
