package managedfields

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	// The object as the version kept serves it: it has no spec.replicas,
	// which v2 removed, but does hold a value svm cannot place in v2.
	object := map[string]any{"spec": map[string]any{"paused": true, "legacy": "kept by the server"}}
	tests := []struct {
		name, fields string
		// noClient: no object can be read, so nothing is dropped.
		noClient bool
		want     *Unmapped
		placed   string // the fields placed, when not the ones given
	}{
		{name: "every field is in the version kept", fields: `{"f:metadata":{"f:labels":{"f:team":{}}},"f:spec":{"f:paused":{}}}`},
		{name: "a field neither the version kept nor the object has owns nothing: dropped",
			fields: `{"f:spec":{".":{},"f:paused":{},"f:replicas":{}}}`, placed: `{"f:spec":{".":{},"f:paused":{}}}`},
		{name: "under a dropped field, all is dropped",
			fields: `{"f:spec":{"f:paused":{},"f:old":{".":{},"f:a":{},"f:b":{"f:c":{}}}}}`, placed: `{"f:spec":{"f:paused":{}}}`},
		{name: "a value the object has where the version kept has no field: the entry stays", fields: `{"f:spec":{"f:paused":{},"f:legacy":{}}}`,
			want: &Unmapped{Reason: NotInVersion, Message: "example.com/v2 has no field .spec.legacy"}},
		{name: "without the object nothing can be dropped: the entry stays", fields: `{"f:spec":{"f:paused":{},"f:replicas":{}}}`, noClient: true,
			want: &Unmapped{Reason: NotInVersion, Message: "example.com/v2 has no field .spec.replicas"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reads := 0
			m := schemaMapper{kept: widgetSchema(t), read: func(context.Context, Do, *Object) (*unstructured.Unstructured, error) {
				reads++
				return &unstructured.Unstructured{Object: object}, nil
			}}
			if tt.noClient {
				m.read = nil
			}
			fields := set(t, tt.fields)
			got, err := m.Place(context.Background(), nil, &Object{Name: "w"}, metav1.ManagedFieldsEntry{}, fields)
			var u *Unmapped
			errors.As(err, &u)
			if diff := cmp.Diff(tt.want, u); diff != "" {
				t.Fatalf("Place (-want +got):\n%s", diff)
			}
			if tt.want != nil {
				return
			}
			want := fields
			if tt.placed != "" {
				want = set(t, tt.placed)
			}
			if !got.Equals(want) {
				t.Errorf("Place = %s, want %s", got, want)
			}
			if tt.placed == "" && reads != 0 {
				t.Errorf("read the object %d times for fields the version kept has, want none", reads)
			}
		})
	}
}

func TestSchemaMapperPlaceStopsOnAConflict(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "widgets"}, "w", errors.New("written since"))
	m := schemaMapper{kept: widgetSchema(t), read: func(context.Context, Do, *Object) (*unstructured.Unstructured, error) {
		return nil, conflict
	}}
	_, err := m.Place(context.Background(), nil, &Object{Name: "w"}, metav1.ManagedFieldsEntry{}, set(t, `{"f:spec":{"f:replicas":{}}}`))
	if !apierrors.IsConflict(err) {
		t.Errorf("Place = %v, want the conflict, so that the object is read again", err)
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
