package framework

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CreateDroppingResource creates r's CRD, served in v1 (stored) and v2
// without a conversion webhook, whose v2 dropped a field: v1's spec has
// color and legacy, v2's color alone, and neither keeps unknown fields, so
// the API server prunes legacy from an object read or written in v2. A
// managedFields entry that owns spec.legacy cannot name v2 as it is.
func (e *Env) CreateDroppingResource(t testing.TB, r Resource) {
	t.Helper()
	version := func(name string, storage bool, fields ...string) apiextensionsv1.CustomResourceDefinitionVersion {
		spec := map[string]apiextensionsv1.JSONSchemaProps{}
		for _, f := range fields {
			spec[f] = apiextensionsv1.JSONSchemaProps{Type: "string"}
		}
		return apiextensionsv1.CustomResourceDefinitionVersion{
			Name: name, Served: true, Storage: storage,
			Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
				Type:       "object",
				Properties: map[string]apiextensionsv1.JSONSchemaProps{"spec": {Type: "object", Properties: spec}},
			}},
		}
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: r.CRDName()},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: r.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: r.Plural, Singular: strings.ToLower(r.Kind), Kind: r.Kind, ListKind: r.Kind + "List"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				version("v1", true, "color", "legacy"),
				version("v2", false, "color"),
			},
		},
	}
	if err := e.Client.Create(Context(t, time.Minute), crd); err != nil {
		t.Fatalf("create CRD %s: %v", r.CRDName(), err)
	}
	e.WaitEstablished(t, r.CRDName())
}

// ApplyEach applies spec (a JSON object's members, as `"spec":{...}`) to
// each of r's objects named names in namespace, through version as
// manager, with server-side apply; force takes fields other managers own.
// It returns the first error, naming the object.
func (e *Env) ApplyEach(t testing.TB, r Resource, version, manager, namespace string, names []string, spec string, force bool) error {
	t.Helper()
	ctx := Context(t, 2*time.Minute)
	for _, name := range names {
		patch := fmt.Sprintf(`{"apiVersion":%q,"kind":%q,"metadata":{"name":%q,"namespace":%q},%s}`,
			r.Group+"/"+version, r.Kind, name, namespace, spec)
		opts := metav1.PatchOptions{FieldManager: manager}
		if force {
			opts.Force = ptr(true)
		}
		if _, err := e.Dynamic.Resource(r.GVR(version)).Namespace(namespace).Patch(ctx, name, types.ApplyPatchType, []byte(patch), opts); err != nil {
			return fmt.Errorf("server-side apply of %s/%s through %s as %s: %w", namespace, name, version, manager, err)
		}
	}
	return nil
}

// RemoveCRDVersion removes version from the named CRD's spec.versions:
// what the API server refuses while status.storedVersions lists it.
func (e *Env) RemoveCRDVersion(t testing.TB, name, version string) error {
	t.Helper()
	ctx := Context(t, time.Minute)
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := e.Client.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
		t.Fatalf("get CRD %s: %v", name, err)
	}
	crd.Spec.Versions = slices.DeleteFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == version })
	return e.Client.Update(ctx, crd)
}

// ExpectAppliesAfterV1Removed checks the objects named names in namespace
// of a CreateDroppingResource after storedVersions were pruned to [v2]:
// every raw value and every managedFields entry in etcd is v2, manager's
// one entry owns spec.color and not the dropped spec.legacy, color is
// still red; then v1 is removed from the CRD, and manager's server-side
// apply through v2 works as before, while another manager still needs to
// force to take spec.color from it.
func (e *Env) ExpectAppliesAfterV1Removed(t testing.TB, r Resource, manager, namespace string, names []string) {
	t.Helper()
	n := len(names)
	e.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": n})
	if got, want := e.ManagedFieldsVersions(t, r.EtcdPrefix()), map[string]int{r.Group + "/v2": n}; !maps.Equal(got, want) {
		t.Errorf("managedFields in etcd %v, want %v: the entries moved to v2", got, want)
	}
	for _, o := range e.List(t, r.GVR("v2")) {
		if color, _, _ := unstructured.NestedString(o.Object, "spec", "color"); color != "red" {
			t.Errorf("%s: spec.color %q, want red", o.GetName(), color)
		}
		entries := o.GetManagedFields()
		if len(entries) != 1 || entries[0].Manager != manager || entries[0].APIVersion != r.Group+"/v2" {
			t.Fatalf("%s: managedFields %+v, want %s's one entry naming v2", o.GetName(), entries, manager)
		}
		if fields := string(entries[0].FieldsV1.Raw); !strings.Contains(fields, `"f:color"`) || strings.Contains(fields, "legacy") {
			t.Errorf("%s: %s's entry owns %s, want spec.color and not spec.legacy", o.GetName(), manager, fields)
		}
	}
	if err := e.RemoveCRDVersion(t, r.CRDName(), "v1"); err != nil {
		t.Fatalf("remove v1 after the prune: %v", err)
	}
	Eventually(t, "v1 no longer served", time.Minute, func(context.Context) (bool, error) {
		_, err := e.Discovery.ServerResourcesForGroupVersion(r.Group + "/v1")
		return err != nil, nil
	})
	if err := e.ApplyEach(t, r, "v2", manager, namespace, names, `"spec":{"color":"blue"}`, false); err != nil {
		t.Fatalf("%s's apply through v2 after v1's removal: %v", manager, err)
	}
	if err := e.ApplyEach(t, r, "v2", "another-manager", namespace, names[:1], `"spec":{"color":"green"}`, false); !apierrors.IsConflict(err) {
		t.Errorf("another manager's apply of spec.color = %v, want a conflict: %s still owns it", err, manager)
	}
	for _, o := range e.List(t, r.GVR("v2")) {
		if color, _, _ := unstructured.NestedString(o.Object, "spec", "color"); color != "blue" {
			t.Errorf("%s: spec.color %q after %s's apply, want blue", o.GetName(), color, manager)
		}
	}
}

// DroppingObjects creates n objects of a CreateDroppingResource in
// namespace through v1, applied by manager with spec.color red and
// spec.legacy set, and returns their names: manager's one entry owns both
// fields and names v1.
func (e *Env) DroppingObjects(t testing.TB, r Resource, manager, namespace string, n int) []string {
	t.Helper()
	e.CreateNamespace(t, namespace)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("%s-%02d", strings.ToLower(r.Kind), i)
	}
	if err := e.ApplyEach(t, r, "v1", manager, namespace, names, `"spec":{"color":"red","legacy":"old"}`, false); err != nil {
		t.Fatal(err)
	}
	if got, want := e.ManagedFieldsVersions(t, r.EtcdPrefix()), map[string]int{r.Group + "/v1": n}; !maps.Equal(got, want) {
		t.Fatalf("managedFields before %v, want %v", got, want)
	}
	return names
}
