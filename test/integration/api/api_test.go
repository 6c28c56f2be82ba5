// Package api_test checks svm's generated CRDs on the real API server:
// validation rejects bad and changed specs with clear messages, objects in
// the reference migrator's shape are accepted, and the printer columns show
// what an operator needs.
package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

var migrationsGVR = migrationv1alpha1.GroupVersion.WithResource("storageversionmigrations")

// The tests create svm's objects and read them back, no more: they share
// one control plane, with svm's CRDs installed, and name their objects
// apart.
func TestMain(m *testing.M) { framework.Main(m) }

func TestValidation(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	ctx := framework.Context(t, 2*time.Minute)

	t.Run("reference-shaped migration is accepted", func(t *testing.T) {
		// Exactly what a script written for the reference migrator creates.
		obj := mustUnstructured(t, `{
			"apiVersion": "migration.k8s.io/v1alpha1",
			"kind": "StorageVersionMigration",
			"metadata": {"generateName": "secrets-"},
			"spec": {"resource": {"group": "", "version": "v1", "resource": "secrets"}, "continueToken": ""}
		}`)
		created, err := env.Dynamic.Resource(migrationsGVR).Create(ctx, obj, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		got, _, _ := unstructured.NestedMap(created.Object, "spec", "resource")
		if diff := cmp.Diff(map[string]any{"group": "", "version": "v1", "resource": "secrets"}, got); diff != "" {
			t.Errorf("stored spec.resource (-want +got):\n%s", diff)
		}
	})

	t.Run("changing spec.resource is rejected", func(t *testing.T) {
		m := &migrationv1alpha1.StorageVersionMigration{
			ObjectMeta: metav1.ObjectMeta{Name: framework.TestName(t)},
			Spec: migrationv1alpha1.StorageVersionMigrationSpec{
				Resource: migrationv1alpha1.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"},
			},
		}
		if err := env.Client.Create(ctx, m); err != nil {
			t.Fatalf("create: %v", err)
		}
		for name, mutate := range map[string]func(*migrationv1alpha1.GroupVersionResource){
			"resource": func(r *migrationv1alpha1.GroupVersionResource) { r.Resource = "gadgets" },
			"group":    func(r *migrationv1alpha1.GroupVersionResource) { r.Group = "other.example.com" },
			"version":  func(r *migrationv1alpha1.GroupVersionResource) { r.Version = "v2" },
		} {
			changed := m.DeepCopy()
			mutate(&changed.Spec.Resource)
			err := env.Client.Update(ctx, changed)
			wantInvalid(t, "change "+name, err, "spec.resource is immutable")
		}
		// The continue token is not part of the immutable resource.
		m.Spec.ContinueToken = "token"
		if err := env.Client.Update(ctx, m); err != nil {
			t.Errorf("update continueToken: %v", err)
		}
	})

	invalid := []struct {
		name string
		spec string
		want string
	}{
		{"no spec", `{}`, "spec: Required value"},
		{"no resource", `{"spec": {}}`, "spec.resource: Required value"},
		{"no resource name", `{"spec": {"resource": {"version": "v1"}}}`, "spec.resource.resource: Required value"},
		{"no version", `{"spec": {"resource": {"resource": "secrets"}}}`, "spec.resource.version: Required value"},
		{"upper-case resource", `{"spec": {"resource": {"version": "v1", "resource": "Secrets"}}}`, "spec.resource.resource in body should match"},
		{"resource with a slash", `{"spec": {"resource": {"version": "v1", "resource": "secrets/status"}}}`, "spec.resource.resource in body should match"},
		{"bad group", `{"spec": {"resource": {"group": "Example_com", "version": "v1", "resource": "widgets"}}}`, "spec.resource.group in body should match"},
		{"bad version", `{"spec": {"resource": {"version": "1", "resource": "widgets"}}}`, "spec.resource.version in body should match"},
	}
	for _, tt := range invalid {
		t.Run("invalid: "+tt.name, func(t *testing.T) {
			obj := mustUnstructured(t, tt.spec)
			obj.SetAPIVersion("migration.k8s.io/v1alpha1")
			obj.SetKind("StorageVersionMigration")
			obj.SetName(framework.TestName(t))
			_, err := env.Dynamic.Resource(migrationsGVR).Create(ctx, obj, metav1.CreateOptions{})
			wantInvalid(t, "create", err, tt.want)
		})
	}

	t.Run("condition types are the three the reference defines", func(t *testing.T) {
		m := &migrationv1alpha1.StorageVersionMigration{
			ObjectMeta: metav1.ObjectMeta{Name: framework.TestName(t)},
			Spec:       migrationv1alpha1.StorageVersionMigrationSpec{Resource: migrationv1alpha1.GroupVersionResource{Version: "v1", Resource: "pods"}},
		}
		if err := env.Client.Create(ctx, m); err != nil {
			t.Fatalf("create: %v", err)
		}
		m.Status.Conditions = []migrationv1alpha1.MigrationCondition{{Type: "Exploded", Status: corev1.ConditionTrue}}
		wantInvalid(t, "status update", env.Client.Status().Update(ctx, m), "Unsupported value: \"Exploded\"")
	})

	t.Run("storage state names must match their resource", func(t *testing.T) {
		for _, tt := range []struct {
			name, group, resource, wantErr string
		}{
			{name: "secrets", resource: "secrets"},
			{name: "widgets.example.com", group: "example.com", resource: "widgets"},
			{name: "deployments.apps", group: "", resource: "deployments", wantErr: "metadata.name must be <resource>.<group>"},
			{name: "jobs", group: "batch", resource: "jobs", wantErr: "metadata.name must be <resource>.<group>"},
		} {
			s := &migrationv1alpha1.StorageState{
				ObjectMeta: metav1.ObjectMeta{Name: tt.name},
				Spec:       migrationv1alpha1.StorageStateSpec{Resource: migrationv1alpha1.GroupResource{Group: tt.group, Resource: tt.resource}},
			}
			if got := migrationv1alpha1.StorageStateName(s.Spec.Resource); (got == tt.name) != (tt.wantErr == "") {
				t.Errorf("StorageStateName(%v) = %q, inconsistent with the server's rule for %q", s.Spec.Resource, got, tt.name)
			}
			err := env.Client.Create(ctx, s)
			if tt.wantErr == "" {
				if err != nil {
					t.Errorf("create %s: %v", tt.name, err)
				}
				continue
			}
			wantInvalid(t, "create "+tt.name, err, tt.wantErr)
		}
	})
}

func TestPrinterColumns(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	ctx := framework.Context(t, time.Minute)

	m := env.CreateMigration(t, framework.TestName(t), framework.Widgets)
	env.WriteMigrationStatus(t, m, migrationv1alpha1.StorageVersionMigrationStatus{
		Conditions: []migrationv1alpha1.MigrationCondition{
			{Type: migrationv1alpha1.MigrationRunning, Status: corev1.ConditionFalse, Reason: "Completed"},
			{Type: migrationv1alpha1.MigrationSucceeded, Status: corev1.ConditionTrue, Reason: "AllObjectsRewritten"},
		},
		Progress: migrationv1alpha1.MigrationProgress{Listed: 12, Restored: 7, AlreadyCurrent: 3, WrittenSinceStart: 1, Gone: 1},
	})

	row := tableRow(ctx, t, env.Config, migrationsGVR, m.Name)
	want := map[string]any{"Resource": "widgets", "Group": "example.com", "State": "Succeeded", "Restored": float64(7), "Already Current": float64(3), "Failed": nil,
		"Written Since Start": float64(1), "Gone": float64(1)}
	for col, v := range want {
		if diff := cmp.Diff(v, row[col]); diff != "" {
			t.Errorf("column %s (-want +got):\n%s", col, diff)
		}
	}
	if _, ok := row["Age"]; !ok {
		t.Errorf("no Age column in %v", row)
	}
}

// tableRow asks the server for name as a Table, as kubectl get does, and
// returns its cells by column name.
func tableRow(ctx context.Context, t *testing.T, cfg *rest.Config, gvr schema.GroupVersionResource, name string) map[string]any {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := rest.RESTClientForConfigAndClient(withGV(cfg, gvr.GroupVersion()), hc)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := c.Get().AbsPath("/apis", gvr.Group, gvr.Version, gvr.Resource, name).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	if err != nil {
		t.Fatalf("get table: %v", err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	if len(table.Rows) != 1 {
		t.Fatalf("table has %d rows", len(table.Rows))
	}
	row := map[string]any{}
	for i, col := range table.ColumnDefinitions {
		row[col.Name] = table.Rows[0].Cells[i]
	}
	return row
}

func withGV(cfg *rest.Config, gv schema.GroupVersion) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	c.NegotiatedSerializer = framework.Codecs
	return c
}

func wantInvalid(t *testing.T, what string, err error, wantMessage string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted, want rejected with %q", what, wantMessage)
		return
	}
	if !apierrors.IsInvalid(err) {
		t.Errorf("%s: error %v is not Invalid", what, err)
	}
	if !strings.Contains(err.Error(), wantMessage) {
		t.Errorf("%s: error %q does not say %q", what, err, wantMessage)
	}
}

func mustUnstructured(t *testing.T, js string) *unstructured.Unstructured {
	t.Helper()
	obj := map[string]any{}
	if err := json.Unmarshal([]byte(js), &obj); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: obj}
}
