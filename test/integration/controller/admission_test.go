package controller_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestRefusedWritesInAMigration: with svm controller and its trigger, a
// webhook that refuses the updates of half of a CRD's objects after its
// storage version moved. The trigger's migration ends Failed, naming the
// webhook and the objects it refused in status.refusedBy and the Failed
// condition, and storedVersions keep v1: nothing is pruned while objects
// are stored in it. A migration with spec.throughStatus then writes the
// refused objects through their status subresource and says which
// managedFields entries it had to leave.
func TestRefusedWritesInAMigration(t *testing.T) {
	t.Parallel()
	const n = 200
	env, r, before, _ := refusingHalf(t, n)
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

	// With spec.throughStatus, the refused objects are written through
	// the status subresource: every raw value in v2, content unchanged.
	// Their managedFields entries name v1, and a write through a
	// subresource keeps the stored entries: they are left, counted as
	// Denied, and etcd shows exactly those.
	m := &migrationv1alpha1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: "widgets-through-status"}}
	m.Spec.Resource = migrationv1alpha1.GroupVersionResource{Group: r.Group, Version: "v2", Resource: r.Plural}
	m.Spec.ThroughStatus = true
	if err := env.Client.Create(framework.Context(t, time.Minute), m); err != nil {
		t.Fatal(err)
	}
	done := env.WaitMigration(t, m.Name, 3*time.Minute, "finished", framework.Finished)
	if !framework.Succeeded(done) {
		t.Fatalf("migration with spec.throughStatus did not succeed: %+v", done.Status.Conditions)
	}
	p := done.Status.Progress
	if p.ThroughStatus != n/2 || p.Failed != 0 || p.ManagedFieldsLeft.Total() != n/2 || p.ManagedFieldsLeft.Denied != n/2 || len(done.Status.RefusedBy) != 0 {
		t.Errorf("migration with spec.throughStatus: progress %+v (left %+v), refusedBy %+v; want %d through status, %d entries left as Denied, no refusal leaving an object failed",
			p, p.ManagedFieldsLeft, done.Status.RefusedBy, n/2, n/2)
	}
	if msg := framework.Condition(done, migrationv1alpha1.MigrationSucceeded).Message; !strings.Contains(msg, "entries left naming a retired version 100 (Denied 100)") {
		t.Errorf("the Succeeded condition does not say which entries were left: %q", msg)
	}
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": n})
	env.ExpectUnchanged(t, r.GVR("v1"), before)
	if got, want := env.ManagedFieldsVersions(t, r.EtcdPrefix()), map[string]int{r.Group + "/v1": n / 2, r.Group + "/v2": n / 2}; !maps.Equal(got, want) {
		t.Errorf("etcd's managedFields name %v, want %v: the entries of the objects written through status, and those alone, still name v1", got, want)
	}
}

// TestTheTriggerWritesThroughStatus: svm controller --through-status,
// and a webhook that refuses the updates of half of a CRD's objects. The
// trigger's migration sets spec.throughStatus and succeeds: every raw
// etcd value is in v2, content unchanged, the refused half counted as
// written through status, and the webhook asked about no status write.
// The refused objects' managedFields entries still name v1, and v1 must
// not become removable while they do: storedVersions keep v1, and the
// StorageState, svm status and a metric say why. Once the webhook is gone,
// the trigger's next migration (after its retry delay) moves the entries,
// and only then are storedVersions pruned.
func TestTheTriggerWritesThroughStatus(t *testing.T) {
	t.Parallel()
	const n = 200
	env, r, before, hook := refusingHalf(t, n)
	metricsAddr := framework.FreeAddress(t)
	env.StartSVM(t, framework.ControllerArgs("--crd-settle-delay=1s", "--through-status", "--trigger-retry-delay=5s",
		"--metrics-bind-address", metricsAddr)...)
	env.SetStorage(t, r, "v2")

	gr := r.GVR("v2").GroupResource()
	state := env.WaitStorageState(t, gr, 3*time.Minute, "the prune held", func(s *migrationv1alpha1.StorageState) bool {
		return s.Status.PruneHeld != nil
	})
	m := &migrationv1alpha1.StorageVersionMigration{}
	if err := env.Client.Get(framework.Context(t, time.Minute), client.ObjectKey{Name: state.Status.PruneHeld.Migration}, m); err != nil {
		t.Fatalf("the migration the hold names: %v", err)
	}
	if !m.Spec.ThroughStatus || !framework.Succeeded(m) {
		t.Fatalf("the trigger's migration %s: spec.throughStatus %v, conditions %+v; want it set, Succeeded", m.Name, m.Spec.ThroughStatus, m.Status.Conditions)
	}
	p := m.Status.Progress
	if p.ThroughStatus != n/2 || p.Failed != 0 || p.ManagedFieldsMoved != n/2 || p.ManagedFieldsLeft.Total() != n/2 || p.ManagedFieldsLeft.Denied != n/2 {
		t.Errorf("progress %+v (left %+v), want %d through status, %d objects' managedFields moved, %d entries left as Denied", p, p.ManagedFieldsLeft, n/2, n/2, n/2)
	}
	if h := state.Status.PruneHeld; h.Reason != migrationv1alpha1.PruneHeldManagedFieldsLeft || h.Entries != n/2 || !strings.Contains(h.Message, "Denied") {
		t.Errorf("status.pruneHeld %+v, want %s, %d entries, what to do about Denied ones", h, migrationv1alpha1.PruneHeldManagedFieldsLeft, n/2)
	}
	// Give the trigger time to act: it must not prune while they are left.
	time.Sleep(3 * time.Second)
	if got := env.CRDStoredVersions(t, r.CRDName()); !slices.Equal(got, []string{"v1", "v2"}) {
		t.Errorf("storedVersions = %v, want [v1 v2]: %d managedFields entries name v1", got, n/2)
	}
	if err := env.RemoveCRDVersion(t, r.CRDName(), "v1"); err == nil {
		t.Error("the API server let v1 be removed while entries name it")
	}
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": n})
	env.ExpectUnchanged(t, r.GVR("v1"), before)
	if got, want := env.ManagedFieldsVersions(t, r.EtcdPrefix()), map[string]int{r.Group + "/v1": n / 2, r.Group + "/v2": n / 2}; !maps.Equal(got, want) {
		t.Errorf("etcd's managedFields name %v, want %v", got, want)
	}
	if got := hook.TotalSubresourceCalls(); got != 0 {
		t.Errorf("the webhook was asked about %d writes through the status subresource, want none", got)
	}
	code, stdout, stderr := framework.SVM(t, "status", "--kubeconfig", env.KubeconfigFile(t))
	if code != 0 {
		t.Fatalf("svm status exited %d\n%s%s", code, stdout, stderr)
	}
	out := strings.Join(strings.Fields(stdout), " ")
	for _, want := range []string{
		fmt.Sprintf("%s: %d managedFields entries still name a version to be pruned (Denied %d)", m.Name, n/2, n/2),
		fmt.Sprintf("%s: storedVersions not pruned since", state.Name),
		fmt.Sprintf("(ManagedFieldsLeft, migration %s)", m.Name),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("svm status does not say %q:\n%s", want, stdout)
		}
	}
	held := "storage_migrator_trigger_prune_held_entries"
	if got := framework.Scrape(t, metricsAddr).Value(held, "resource", gr.String()); got != n/2 {
		t.Errorf("%s{resource=%q} = %v, want %d", held, gr.String(), got, n/2)
	}

	// The webhook gone, the next migration moves the entries: then, and
	// not before, storedVersions are pruned.
	hook.Unregister(t)
	framework.Eventually(t, "storedVersions pruned to [v2]", 3*time.Minute, func(context.Context) (bool, error) {
		return slices.Equal(env.CRDStoredVersions(t, r.CRDName()), []string{"v2"}), nil
	})
	if got, want := env.ManagedFieldsVersions(t, r.EtcdPrefix()), map[string]int{r.Group + "/v2": n}; !maps.Equal(got, want) {
		t.Errorf("etcd's managedFields name %v after the prune, want %v", got, want)
	}
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": n})
	env.ExpectUnchanged(t, r.GVR("v1"), before)
	env.WaitStorageState(t, gr, time.Minute, "the hold lifted", func(s *migrationv1alpha1.StorageState) bool {
		return s.Status.PruneHeld == nil
	})
	framework.Eventually(t, held+" back to 0", time.Minute, func(context.Context) (bool, error) {
		return framework.Scrape(t, metricsAddr).Value(held, "resource", gr.String()) == 0, nil
	})
}

// refusingHalf starts a control plane with svm's CRDs, n objects of a
// custom resource with a status subresource stored in v1, and a webhook
// that refuses the updates of half of them; before is their content.
func refusingHalf(t *testing.T, n int) (env *framework.Env, r framework.Resource, before framework.Snapshot, hook *framework.Webhook) {
	t.Helper()
	env = framework.Start(t, controlplane.Options{})
	env.InstallCRDs(t, framework.CRDBasesDir())
	r = env.NewResourceWithStatus(t)
	env.CreateObjects(t, r, []string{"ns-a", "ns-b"}, n)
	before = env.TakeSnapshot(t, r.GVR("v1"))
	deny := map[string]bool{}
	for key := range before {
		if len(deny) < n/2 {
			deny[key] = true
		}
	}
	return env, r, before, framework.StartDenyingWebhook(t, env, r, deny)
}
