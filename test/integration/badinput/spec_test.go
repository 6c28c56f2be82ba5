package badinput_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/framework"
)

// specChangesRejected adds to api.TestValidation what it does not try:
// spec.resource changed by merge and JSON patches (what `kubectl patch` and
// `kubectl edit` send) rather than by an update, removed, or set over its
// length limits, and status lists over their bounds. Every attempt is
// answered 422 once, and none reaches etcd: the migration's stored value
// keeps its revision.
func (s *suite) specChangesRejected(t *testing.T) {
	env := s.env
	ctx := framework.Context(t, 2*time.Minute)
	// The controller fails it at once: nothing serves gadgets here.
	const name = "spec-target"
	s.env.CreateMigration(t, name, framework.Resource{Group: "notserved.example.com", Plural: "gadgets", Kind: "Gadget"}.GVR("v1"))
	if m := s.env.WaitMigration(t, name, time.Minute, "finished", framework.Finished); framework.Condition(m, migrationv1alpha1.MigrationFailed).Reason != "ResourceNotFound" {
		t.Fatalf("conditions %+v, want Failed with ResourceNotFound", m.Status.Conditions)
	}
	s.expectSettled(t, name)
	key := "/registry/migration.k8s.io/storageversionmigrations/" + name
	stored := env.ModRevisions(t, key)
	if len(stored) != 1 {
		t.Fatalf("etcd holds %v under %s", stored, key)
	}

	migrations := env.Dynamic.Resource(migrationv1alpha1.GroupVersion.WithResource("storageversionmigrations"))
	failedObjects := make([]string, 101)
	for i := range failedObjects {
		failedObjects[i] = fmt.Sprintf(`{"name":"obj-%d","reason":"denied"}`, i)
	}
	tests := []struct {
		name      string
		patchType types.PatchType
		patch     string
		status    bool
		want      string
	}{
		{"merge patch of spec.resource.resource", types.MergePatchType, `{"spec":{"resource":{"resource":"configmaps"}}}`, false, "spec.resource is immutable"},
		{"merge patch moving spec.resource to the core group", types.MergePatchType, `{"spec":{"resource":{"group":null}}}`, false, "spec.resource is immutable"},
		{"JSON patch replacing spec.resource", types.JSONPatchType, `[{"op":"replace","path":"/spec/resource","value":{"group":"apps","version":"v1","resource":"deployments"}}]`, false, "spec.resource is immutable"},
		{"JSON patch removing spec.resource", types.JSONPatchType, `[{"op":"remove","path":"/spec/resource"}]`, false, "spec.resource: Required value"},
		{"continue token over 8192 bytes", types.MergePatchType, `{"spec":{"continueToken":"` + strings.Repeat("x", 8193) + `"}}`, false, "spec.continueToken: Too long"},
		{"more than 100 failed objects", types.MergePatchType, `{"status":{"failedObjects":[` + strings.Join(failedObjects, ",") + `]}}`, true, "status.failedObjects: Too many"},
		{"failed object reason over 1024 bytes", types.MergePatchType, `{"status":{"failedObjects":[{"name":"x","reason":"` + strings.Repeat("r", 1025) + `"}]}}`, true, "status.failedObjects[0].reason: Too long"},
	}
	rejectedBefore := env.ServerMetric(t, "apiserver_request_total", `resource="storageversionmigrations"`, `verb="PATCH"`, `code="422"`)
	for _, tt := range tests {
		var subresources []string
		if tt.status {
			subresources = []string{"status"}
		}
		_, err := migrations.Patch(ctx, name, tt.patchType, []byte(tt.patch), metav1.PatchOptions{}, subresources...)
		expectInvalid(t, tt.name, err, tt.want)
	}
	// A new migration naming a resource longer than any resource name.
	long := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": migrationv1alpha1.GroupVersion.String(), "kind": "StorageVersionMigration",
		"metadata": map[string]any{"name": "spec-too-long"},
		"spec":     map[string]any{"resource": map[string]any{"version": "v1", "resource": strings.Repeat("r", 64)}},
	}}
	_, err := migrations.Create(ctx, long, metav1.CreateOptions{})
	expectInvalid(t, "resource name over 63 bytes", err, "spec.resource.resource: Too long")

	rejected := int(env.ServerMetric(t, "apiserver_request_total", `resource="storageversionmigrations"`, `verb="PATCH"`, `code="422"`) - rejectedBefore)
	if rejected != len(tests) {
		t.Errorf("the API server answered %d patches with 422, want %d (one per attempt)", rejected, len(tests))
	}
	if diff := cmp.Diff(stored, env.ModRevisions(t, key)); diff != "" {
		t.Errorf("a rejected write reached etcd (-before +after):\n%s", diff)
	}
	if got := s.env.GetMigration(t, name).Spec.Resource; got.Group != "notserved.example.com" || got.Resource != "gadgets" {
		t.Errorf("spec.resource is now %+v", got)
	}
	if len(env.ModRevisions(t, "/registry/migration.k8s.io/storageversionmigrations/spec-too-long")) != 0 {
		t.Error("the migration with the over-long resource name was stored")
	}
	framework.Scenario{Name: "spec changes rejected", Objects: 1, Writes: rejected, Retries: -1, Verified: !t.Failed()}.Report(t)
}

func expectInvalid(t *testing.T, what string, err error, want string) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: accepted, want rejected with %q", what, want)
	case !apierrors.IsInvalid(err):
		t.Errorf("%s: error %v is not Invalid", what, err)
	case !strings.Contains(err.Error(), want):
		t.Errorf("%s: error %q does not say %q", what, err, want)
	}
}
