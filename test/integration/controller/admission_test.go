package controller_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestRefusedWritesInAMigration: with svm controller and its trigger, a
// webhook that refuses the updates of half of a CRD's objects after its
// storage version moved. The trigger's migration ends Failed, naming the
// webhook and the objects it refused in status.refusedBy and the Failed
// condition, and storedVersions keep v1: nothing is pruned while objects
// are stored in it.
func TestRefusedWritesInAMigration(t *testing.T) {
	t.Parallel()
	const n = 200
	env := framework.Start(t, controlplane.Options{})
	env.InstallCRDs(t, framework.CRDBasesDir())
	r := env.NewResourceWithStatus(t)
	env.CreateObjects(t, r, []string{"ns-a", "ns-b"}, n)
	before := env.TakeSnapshot(t, r.GVR("v1"))
	deny := map[string]bool{}
	for key := range before {
		if len(deny) < n/2 {
			deny[key] = true
		}
	}
	framework.StartDenyingWebhook(t, env, r, deny)
	env.StartSVM(t, framework.ControllerArgs("--crd-settle-delay=1s")...)
	env.SetStorage(t, r, "v2")

	var failed *migrationv1alpha1.StorageVersionMigration
	framework.Eventually(t, "the trigger's migration to fail", 3*time.Minute, func(ctx context.Context) (bool, error) {
		var list migrationv1alpha1.StorageVersionMigrationList
		if err := env.Client.List(ctx, &list); err != nil {
			return false, err
		}
		for i := range list.Items {
			if m := &list.Items[i]; m.Spec.Resource.Group == r.Group && framework.Failed(m) {
				failed = m
				return true, nil
			}
		}
		return false, nil
	})
	want := []migrationv1alpha1.AdmissionRefusal{{Kind: "Webhook", Name: "validate.example.com", Objects: n / 2}}
	got := slices.Clone(failed.Status.RefusedBy)
	for i := range got {
		if !strings.Contains(got[i].Message, "test policy denies") {
			t.Errorf("refusal message %q does not carry the webhook's words", got[i].Message)
		}
		got[i].Message = ""
	}
	if !slices.Equal(got, want) {
		t.Errorf("status.refusedBy = %+v, want %+v", failed.Status.RefusedBy, want)
	}
	if msg := framework.Condition(failed, migrationv1alpha1.MigrationFailed).Message; !strings.Contains(msg, "admission webhook validate.example.com refused 100 objects") {
		t.Errorf("the Failed condition does not name the webhook: %q", msg)
	}
	if p := failed.Status.Progress; p.Failed != n/2 || p.ThroughStatus != 0 {
		t.Errorf("progress %+v, want %d failed and none written through status", p, n/2)
	}
	// Give the trigger time to act on the failure: it must not prune.
	time.Sleep(3 * time.Second)
	if got := env.CRDStoredVersions(t, r.CRDName()); !slices.Equal(got, []string{"v1", "v2"}) {
		t.Errorf("storedVersions = %v, want [v1 v2]: %d objects are stored in v1", got, n/2)
	}
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v1": n / 2, r.Group + "/v2": n / 2})

	// spec.throughStatus cannot help here: these objects' managedFields
	// name v1, which storedVersions will be pruned of, so their write
	// moves the entries too, and a write through the status subresource
	// cannot carry that. The migration says so by failing alike, naming
	// the webhook, and claims no write through status.
	m := &migrationv1alpha1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: "widgets-through-status"}}
	m.Spec.Resource = migrationv1alpha1.GroupVersionResource{Group: r.Group, Version: "v2", Resource: r.Plural}
	m.Spec.ThroughStatus = true
	if err := env.Client.Create(framework.Context(t, time.Minute), m); err != nil {
		t.Fatal(err)
	}
	done := env.WaitMigration(t, m.Name, 3*time.Minute, "finished", framework.Finished)
	if !framework.Failed(done) || done.Status.Progress.ThroughStatus != 0 || len(done.Status.RefusedBy) != 1 || done.Status.RefusedBy[0].Objects != n/2 {
		t.Errorf("migration with spec.throughStatus: conditions %+v, progress %+v, refusedBy %+v; want Failed, none through status, the webhook naming %d objects",
			done.Status.Conditions, done.Status.Progress, done.Status.RefusedBy, n/2)
	}
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v1": n / 2, r.Group + "/v2": n / 2})
}
