package badinput_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/framework"
)

// webhookTimesOut registers a validating webhook with failurePolicy Fail
// that answers for two objects only after its timeoutSeconds. The API
// server then refuses their writes with 500 "failed calling webhook". svm
// cannot know that the webhook will not recover, so it treats the answer as
// transient: it retries each of the two with backoff, at most ten times in
// all (the engine's attempts), then records them with the server's message
// and goes on. Adaptive pacing keeps one failing write in flight at a time,
// so the two are retried one after the other. The migration ends Failed with ObjectsFailed naming them,
// the others rewritten, and nothing more is sent.
func (s *suite) webhookTimesOut(t *testing.T) {
	env := s.env
	r := framework.Resource{Group: "slowhook.example.com", Plural: "slowgadgets", Kind: "SlowGadget"}
	const ns, n = "badinput-slow", 12
	slow := map[string]bool{ns + "/obj-00003": true, ns + "/obj-00007": true}
	env.CreateResource(t, r)
	env.CreateObjects(t, r, []string{ns}, n)
	env.FlipStorage(t, r)
	hook := framework.StartAdmissionWebhook(t, env, framework.AdmissionHook{
		Resource: r, TimeoutSeconds: 1, FailurePolicy: admissionregistrationv1.Fail,
		Review: func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			if slow[req.Namespace+"/"+req.Name] {
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Second):
				}
			}
			return &admissionv1.AdmissionResponse{Allowed: true}
		},
	})
	updates := env.ServerWrites(t, r.Plural)
	s.env.CreateMigration(t, "slowhook", r.GVR("v1"))
	// The backoff of ten attempts adds up to about a minute, and each
	// attempt waits a second for the webhook: about 70s per object, and
	// the two are retried one after the other.
	m := s.env.WaitMigration(t, "slowhook", 6*time.Minute, "finished", framework.Finished)
	s.expectSettled(t, "slowhook")

	failed := framework.Condition(m, migrationv1alpha1.MigrationFailed)
	if failed.Status != "True" || failed.Reason != "ObjectsFailed" {
		t.Fatalf("conditions %+v, want Failed with ObjectsFailed", m.Status.Conditions)
	}
	got := map[string]bool{}
	for _, f := range m.Status.FailedObjects {
		key := f.Namespace + "/" + f.Name
		got[key] = true
		if !strings.Contains(f.Reason, "failed calling webhook") {
			t.Errorf("failed object %s: reason %q does not name the webhook", key, f.Reason)
		}
		if !strings.Contains(failed.Message, key) {
			t.Errorf("condition message %q does not name %s", failed.Message, key)
		}
	}
	if diff := cmp.Diff(slow, got); diff != "" {
		t.Errorf("failed objects (-want +got):\n%s", diff)
	}
	if p := m.Status.Progress; p.Migrated() != n-2 || p.Failed != 2 {
		t.Errorf("progress %+v, want %d rewritten and 2 failed", p, n-2)
	}
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": n - 2, r.Group + "/v1": 2})
	const attempts = 10 // migrator.Options.Retry's default
	for key := range slow {
		if calls := hook.Calls(key); calls < 2 || calls > attempts {
			t.Errorf("webhook called %d times for %s, want a few retries and at most %d", calls, key, attempts)
		}
	}
	writes := env.ServerWrites(t, r.Plural) - updates
	if writes > n-2+2*attempts {
		t.Errorf("%d writes, want at most %d", writes, n-2+2*attempts)
	}
	retries := s.retries(t, r)
	if retries > 2*(attempts-1) {
		t.Errorf("%d retries, want at most %d", retries, 2*(attempts-1))
	}
	framework.Scenario{Name: "admission webhook times out", Objects: n, Writes: writes, Retries: retries, Verified: !t.Failed()}.Report(t)
}

// webhookMutates registers a mutating webhook that stamps a label on every
// UPDATE. svm's write carries no content, but admission runs on it like on
// any other write: the webhook's change goes through and is stored with the
// re-encoded object. svm cannot prevent that, nor see it (it reads only
// metadata and compares nothing), and it claims no more than it did: every
// object rewritten, the migration Succeeded. Nor does the API server record
// who made the change: it attributes no change of mutating admission in
// managedFields, so the label is owned by no manager and the object's
// managedFields stay as they were; only the object itself (and the
// webhook's own records) show it. Nothing else changes, and each object is
// asked about once.
func (s *suite) webhookMutates(t *testing.T) {
	env := s.env
	r := framework.Resource{Group: "mutated.example.com", Plural: "mutgadgets", Kind: "MutGadget"}
	const ns, n, label = "badinput-mutate", 20, "example.com/stamped"
	env.CreateResource(t, r)
	env.CreateObjects(t, r, []string{ns}, n)
	env.FlipStorage(t, r)
	before := env.TakeSnapshot(t, r.GVR("v1"))
	hook := framework.StartAdmissionWebhook(t, env, framework.AdmissionHook{
		Resource: r, Mutating: true,
		Review: func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			jsonPatch := admissionv1.PatchTypeJSONPatch
			return &admissionv1.AdmissionResponse{
				Allowed: true, PatchType: &jsonPatch,
				Patch: []byte(`[{"op":"add","path":"/metadata/labels/example.com~1stamped","value":"by-webhook"}]`),
			}
		},
	})
	updates := env.ServerWrites(t, r.Plural)
	s.env.CreateMigration(t, "mutate", r.GVR("v1"))
	m := s.env.WaitMigration(t, "mutate", 2*time.Minute, "finished", framework.Finished)
	if !m.HasCondition(migrationv1alpha1.MigrationSucceeded) || m.Status.Progress.Migrated() != n || m.Status.Progress.Failed != 0 {
		t.Fatalf("conditions %+v, progress %+v: want Succeeded with %d rewritten", m.Status.Conditions, m.Status.Progress, n)
	}
	writes := env.ServerWrites(t, r.Plural) - updates
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": n})

	after := env.TakeSnapshot(t, r.GVR("v1"))
	for key, obj := range after {
		u := &unstructured.Unstructured{Object: obj}
		if u.GetLabels()[label] != "by-webhook" {
			t.Errorf("%s: labels %v, want the webhook's %s", key, u.GetLabels(), label)
		}
		if owner := ownerOf(u, label); owner != "" {
			t.Errorf("%s: managedFields give %s to %s: the API server now records who made admission changes, and this test's account is out of date", key, label, owner)
		}
		if calls := hook.Calls(key); calls != 1 {
			t.Errorf("%s: webhook called %d times, want 1", key, calls)
		}
		// Without the webhook's label, the object is what it was, down to
		// its managedFields.
		labels := u.GetLabels()
		delete(labels, label)
		u.SetLabels(labels)
	}
	if diff := before.Diff(after); diff != "" {
		t.Errorf("objects changed beyond the webhook's label (-before +after):\n%s", diff)
	}
	framework.Scenario{Name: "admission webhook mutates", Objects: n, Writes: writes, Retries: s.retries(t, r), Verified: !t.Failed()}.Report(t)
}

// ownerOf is the manager whose managedFields entry owns obj's label, or "".
func ownerOf(obj *unstructured.Unstructured, label string) string {
	for _, f := range obj.GetManagedFields() {
		if f.FieldsV1 != nil && strings.Contains(string(f.FieldsV1.Raw), fmt.Sprintf(`"f:%s"`, label)) {
			return f.Manager
		}
	}
	return ""
}
