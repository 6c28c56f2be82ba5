package managedfields

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/kube-openapi/pkg/validation/spec"
)

// scalerModels are the schemas of a built-in kind in two versions, as
// autoscaling's: v2 has spec.behavior and spec.metrics, which v1 keeps as
// JSON in annotations, and v1 has spec.targetCPU, which v2 keeps in
// spec.metrics.
const scalerModels = `{
  "io.example.v1.Scaler": {
    "type": "object",
    "x-kubernetes-group-version-kind": [{"group": "example.io", "version": "v1", "kind": "Scaler"}],
    "properties": {
      "apiVersion": {"type": "string"},
      "kind": {"type": "string"},
      "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
      "spec": {"type": "object", "properties": {
        "minReplicas": {"type": "integer"},
        "maxReplicas": {"type": "integer"},
        "legacy": {"type": "string"},
        "selector": {"type": "object", "additionalProperties": {"type": "string"}, "x-kubernetes-map-type": "atomic"},
        "targetCPU": {"type": "integer"}
      }}
    }
  },
  "io.example.v2.Scaler": {
    "type": "object",
    "x-kubernetes-group-version-kind": [{"group": "example.io", "version": "v2", "kind": "Scaler"}],
    "properties": {
      "apiVersion": {"type": "string"},
      "kind": {"type": "string"},
      "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"},
      "spec": {"type": "object", "properties": {
        "minReplicas": {"type": "integer"},
        "maxReplicas": {"type": "integer"},
        "legacy": {"type": "string"},
        "selector": {"type": "object", "additionalProperties": {"type": "string"}, "x-kubernetes-map-type": "atomic"},
        "behavior": {"type": "object", "properties": {"window": {"type": "integer"}}},
        "paused": {"type": "boolean"},
        "metrics": {"type": "array", "x-kubernetes-list-type": "atomic", "items": {"type": "string"}}
      }}
    }
  },
  "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {
    "type": "object",
    "properties": {
      "name": {"type": "string"},
      "labels": {"type": "object", "additionalProperties": {"type": "string"}},
      "annotations": {"type": "object", "additionalProperties": {"type": "string"}}
    }
  }
}`

func scalerSchema(t *testing.T, version string) *versionSchema {
	t.Helper()
	var models map[string]*spec.Schema
	if err := json.Unmarshal([]byte(scalerModels), &models); err != nil {
		t.Fatal(err)
	}
	vs, err := newVersionSchema(models, schema.GroupVersionKind{Group: "example.io", Version: version, Kind: "Scaler"})
	if err != nil || vs == nil {
		t.Fatalf("newVersionSchema = %v, %v", vs, err)
	}
	return vs
}

// scalerIn is the object as version serves it, and what the field manager
// sees of it.
func scalerIn(t *testing.T, vs *versionSchema, object string) paired {
	t.Helper()
	var o map[string]any
	if err := json.Unmarshal([]byte(object), &o); err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: normalize(o).(map[string]any)}
	u.SetGroupVersionKind(vs.gvk)
	f, err := vs.fields(u)
	if err != nil {
		t.Fatal(err)
	}
	return paired{schema: vs, object: u, fields: &f}
}

func TestSamePaths(t *testing.T) {
	// One object as the two versions serve it: v1 holds v2's behavior in
	// an annotation and its metrics in spec.targetCPU; spec.legacy holds
	// another value in v2 (a conversion that changes it).
	from := scalerIn(t, scalerSchema(t, "v1"), `{
		"metadata": {"name": "s", "labels": {"team": "a"}, "annotations": {"note": "n", "example.io/behavior": "{\"window\":60}"}},
		"spec": {"maxReplicas": 5, "targetCPU": 60, "legacy": "a", "selector": {}}}`)
	to := scalerIn(t, scalerSchema(t, "v2"), `{
		"metadata": {"name": "s", "labels": {"team": "a"}, "annotations": {"note": "n"}},
		"spec": {"maxReplicas": 5, "behavior": {"window": 60}, "metrics": ["cpu=60"], "legacy": "b", "selector": {}}}`)
	notServed := paired{}
	tests := []struct {
		name   string
		fields string
		from   paired
		probe  string // the leaves a dry run must show staying
		want   *Unmapped
	}{
		{name: "leaves at the same path with the same value are probed",
			fields: `{"f:metadata":{"f:labels":{".":{},"f:team":{}}},"f:spec":{"f:maxReplicas":{}}}`, from: from,
			probe: `{"f:metadata":{"f:labels":{"f:team":{}}},"f:spec":{"f:maxReplicas":{}}}`},
		{name: "an empty map the same in both versions stays, with no value to change it to",
			fields: `{"f:spec":{"f:selector":{},"f:maxReplicas":{}}}`, from: from,
			probe: `{"f:spec":{"f:maxReplicas":{}}}`},
		{name: "a map the object has in both versions stays, its keys are probed",
			fields: `{"f:metadata":{"f:annotations":{".":{},"f:note":{}}}}`, from: from,
			probe: `{"f:metadata":{"f:annotations":{"f:note":{}}}}`},
		{name: "an annotation the version kept does not show: the conversion puts it elsewhere",
			fields: `{"f:metadata":{"f:annotations":{"f:example.io/behavior":{}}}}`, from: from,
			want: &Unmapped{Reason: NotConverted, Message: "the object has .metadata.annotations.example.io/behavior in example.io/v1 and not in example.io/v2: the conversion puts it elsewhere"}},
		{name: "a value the conversion changes",
			fields: `{"f:spec":{"f:legacy":{}}}`, from: from,
			want: &Unmapped{Reason: NotConverted, Message: ".spec.legacy holds another value in example.io/v2 than in example.io/v1: the conversion changes it"}},
		{name: "a zero value neither version shows stays where both schemas have it",
			fields: `{"f:spec":{"f:minReplicas":{}}}`, from: from, probe: `{}`},
		{name: "a value only the version kept shows came from elsewhere",
			fields: `{"f:spec":{"f:behavior":{"f:window":{}}}}`, from: from,
			want: &Unmapped{Reason: NotConverted, Message: "the object has .spec.behavior.window in example.io/v2 and not in example.io/v1: the conversion puts it there from elsewhere"}},
		{name: "a field neither the object nor the entry's version has",
			fields: `{"f:spec":{"f:paused":{}}}`, from: from,
			want: &Unmapped{Reason: Unplaced, Message: "it owns .spec.paused, which example.io/v1 has no field at"}},
		{name: "not served: a field the object has in the version kept stays",
			fields: `{"f:metadata":{"f:labels":{"f:team":{}}},"f:spec":{"f:maxReplicas":{}}}`, from: notServed, probe: `{}`},
		{name: "not served: a field the object does not have in the version kept",
			fields: `{"f:metadata":{"f:annotations":{"f:example.io/behavior":{}}}}`, from: notServed,
			want: &Unmapped{Reason: NotServed, Message: "example.io/v1 is not served: nothing shows where its field .metadata.annotations.example.io/behavior is, and the object has no value there in example.io/v2"}},
		{name: "not served: a zero value cannot be told from a field the conversion moved",
			fields: `{"f:spec":{"f:minReplicas":{}}}`, from: notServed,
			want: &Unmapped{Reason: NotServed, Message: "example.io/v1 is not served: nothing shows where its field .spec.minReplicas is, and the object has no value there in example.io/v2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			probe, err := samePaths(set(t, tt.fields), tt.from, to, "example.io/v1")
			var got *Unmapped
			if err != nil {
				u, ok := err.(*Unmapped)
				if !ok {
					t.Fatalf("samePaths = %v, want an *Unmapped or nil", err)
				}
				got = u
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Fatalf("samePaths (-want +got):\n%s", diff)
			}
			if tt.want == nil && !probe.Equals(set(t, tt.probe)) {
				t.Errorf("probe = %s, want %s", probe, set(t, tt.probe))
			}
		})
	}
}

func TestMovedElsewhere(t *testing.T) {
	probe := set(t, `{"f:metadata":{"f:annotations":{"f:example.io/behavior":{}}}}`)
	tests := []struct {
		name, image string
		want        string
	}{
		{name: "the change lands at another path", image: `{"f:spec":{"f:behavior":{"f:window":{}}}}`,
			want: "the conversion from example.io/v1 puts its fields elsewhere in example.io/v2 (a change to them changes .spec.behavior.window)"},
		{name: "the change lands nowhere", image: `{}`,
			want: "the conversion from example.io/v1 does not keep .metadata.annotations.example.io/behavior at its path in example.io/v2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := movedElsewhere(probe, set(t, tt.image), "example.io/v1", "example.io/v2")
			if diff := cmp.Diff(&Unmapped{Reason: NotConverted, Message: tt.want}, got); diff != "" {
				t.Errorf("movedElsewhere (-want +got):\n%s", diff)
			}
		})
	}
}
