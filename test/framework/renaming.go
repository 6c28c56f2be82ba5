package framework

import (
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CreateRenamingResource creates r's CRD, served in v1 (stored) and v2,
// whose versions differ in one field's path: v1's spec.replicas is v2's
// spec.scale.replicas. Both versions have the status subresource and the
// scale subresource, each version's scale reading its own path. Its
// objects convert only through StartRenamingConversionWebhook, which the
// caller starts next. Besides replicas, spec holds paused (a bool), color,
// mode (Fast or Slow, an enum) and ports (a list keyed by name), and keeps
// unknown fields, as data does, so that Resource.Object's widgets fit it
// too.
func (e *Env) CreateRenamingResource(t testing.TB, r Resource) {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: r.CRDName()},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: r.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: r.Plural, Singular: strings.ToLower(r.Kind), Kind: r.Kind, ListKind: r.Kind + "List"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				renamingVersion("v1", true, ".spec.replicas", map[string]apiextensionsv1.JSONSchemaProps{"replicas": {Type: "integer"}}),
				renamingVersion("v2", false, ".spec.scale.replicas", map[string]apiextensionsv1.JSONSchemaProps{"scale": {
					Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"replicas": {Type: "integer"}},
				}}),
			},
		},
	}
	if err := e.Client.Create(Context(t, time.Minute), crd); err != nil {
		t.Fatalf("create CRD %s: %v", r.CRDName(), err)
	}
	e.WaitEstablished(t, r.CRDName())
}

// renamingVersion is a version of CreateRenamingResource's CRD: replicas
// are where its spec properties put them, and its scale reads them there.
func renamingVersion(name string, storage bool, replicasPath string, replicas map[string]apiextensionsv1.JSONSchemaProps) apiextensionsv1.CustomResourceDefinitionVersion {
	spec := map[string]apiextensionsv1.JSONSchemaProps{
		"paused": {Type: "boolean"},
		"color":  {Type: "string"},
		"mode":   {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"Fast"`)}, {Raw: []byte(`"Slow"`)}}},
		"ports": {
			Type: "array", XListType: ptr("map"), XListMapKeys: []string{"name"},
			Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{
				Type: "object", Required: []string{"name"},
				Properties: map[string]apiextensionsv1.JSONSchemaProps{"name": {Type: "string"}, "port": {Type: "integer"}},
			}},
		},
	}
	for k, v := range replicas {
		spec[k] = v
	}
	return apiextensionsv1.CustomResourceDefinitionVersion{
		Name: name, Served: true, Storage: storage,
		Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
			Type: "object",
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"spec": {Type: "object", Properties: spec, XPreserveUnknownFields: ptr(true)},
				"data": {Type: "object", XPreserveUnknownFields: ptr(true)},
				"status": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"phase": {Type: "string"}, "replicas": {Type: "integer"},
				}},
			},
		}},
		Subresources: &apiextensionsv1.CustomResourceSubresources{
			Status: &apiextensionsv1.CustomResourceSubresourceStatus{},
			Scale:  &apiextensionsv1.CustomResourceSubresourceScale{SpecReplicasPath: replicasPath, StatusReplicasPath: ".status.replicas"},
		},
	}
}

// StartRenamingConversionWebhook is StartConversionWebhook for a resource
// of CreateRenamingResource: besides apiVersion it moves v1's
// spec.replicas to v2's spec.scale.replicas, and back.
func (e *Env) StartRenamingConversionWebhook(t testing.TB, r Resource) *ConversionWebhook {
	t.Helper()
	return e.startConversionWebhook(t, r, func(obj map[string]any, from, to string) {
		spec, _ := obj["spec"].(map[string]any)
		if spec == nil || from == to {
			return
		}
		if strings.HasSuffix(to, "/v2") {
			if replicas, ok := spec["replicas"]; ok {
				delete(spec, "replicas")
				spec["scale"] = map[string]any{"replicas": replicas}
			}
			return
		}
		scale, _ := spec["scale"].(map[string]any)
		delete(spec, "scale")
		if replicas, ok := scale["replicas"]; ok {
			spec["replicas"] = replicas
		}
	})
}
