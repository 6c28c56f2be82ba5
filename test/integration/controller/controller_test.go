// Package controller_test runs `svm controller` as a real process against a
// real control plane: migrations complete, survive SIGKILL, and fail with a
// reason when they cannot complete. Every test runs the controller with
// --trigger=false (it creates its migrations itself) on a control plane of
// its own, since the controller acts on every migration in the cluster;
// so the tests run side by side.
package controller_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

var widgetsPrefix = framework.EtcdPrefix(framework.Widgets.GroupResource())

// setup starts a control plane of the test's own (every test here runs
// `svm controller`, which acts on every migration in the cluster) with
// svm's CRDs, and n widgets, named obj-NNNNN, over three namespaces,
// stored in v1 after the storage moved to v2. It returns their snapshot.
func setup(t *testing.T, n int) (*framework.Env, framework.Snapshot) {
	t.Helper()
	env := framework.Start(t, controlplane.Options{})
	env.InstallCRDs(t, framework.CRDBasesDir())
	env.CreateWidgetCRD(t, "v1")
	return env, env.StoredInOldVersion(t, framework.WidgetResource, []string{"ns-a", "ns-b", "ns-c"}, n)
}

func TestMigrationSucceeds(t *testing.T) {
	t.Parallel()
	const n = 1000 // two chunks
	env, before := setup(t, n)
	env.StartSVM(t, framework.ControllerArgs("--trigger=false")...)
	env.CreateMigration(t, "widgets", framework.Widgets)

	m := env.WaitMigrationSucceeded(t, "widgets", 3*time.Minute)
	env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v2": n})
	env.ExpectUnchanged(t, framework.Widgets, before)
	p := m.Status.Progress
	if p.Listed != n || p.Migrated() != n || p.Skipped() != 0 || p.Failed != 0 {
		t.Errorf("progress %+v, want %d listed and rewritten", p, n)
	}
	if running := framework.Condition(m, migrationv1alpha1.MigrationRunning); running.Status != corev1.ConditionFalse {
		t.Errorf("Running condition %+v, want False", running)
	}
	if m.Status.StartTime == nil || m.Status.CompletionTime == nil || m.Status.ResourceVersionCheckpoint == "" ||
		m.Status.StorageVersionHash != env.StorageVersionHash(t, framework.Widgets) || m.Spec.ContinueToken != "" {
		t.Errorf("status %+v, spec.continueToken %q: want times, checkpoint, the current hash and no token", m.Status, m.Spec.ContinueToken)
	}
}

func TestControllerKilledMidMigrationResumes(t *testing.T) {
	t.Parallel()
	// Six chunks at a rate that leaves seconds of work after the kill.
	const n, chunk = 1200, 200
	env, before := setup(t, n)
	args := framework.ControllerArgs("--trigger=false", "--qps", "120", "--chunk-size", fmt.Sprint(chunk))
	svm := env.StartSVM(t, args...)
	env.CreateMigration(t, "widgets", framework.Widgets)

	// Kill it once two chunks are saved and a third is under way.
	env.WaitMigration(t, "widgets", 2*time.Minute, "two chunks saved", func(m *migrationv1alpha1.StorageVersionMigration) bool {
		return m.Status.Progress.Listed >= 2*chunk && m.Spec.ContinueToken != ""
	})
	time.Sleep(500 * time.Millisecond)
	svm.Kill()
	killed := env.GetMigration(t, "widgets")
	if !killed.HasCondition(migrationv1alpha1.MigrationRunning) || framework.Succeeded(killed) {
		t.Fatalf("after the kill: %+v, want still Running", killed.Status.Conditions)
	}
	versions := env.StoredVersions(t, widgetsPrefix)
	if versions["example.com/v1"] == 0 {
		t.Fatalf("migration finished before the kill (%v); the test would prove nothing", versions)
	}

	env.StartSVM(t, args...)
	m := env.WaitMigrationSucceeded(t, "widgets", 3*time.Minute)
	env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v2": n})
	env.ExpectUnchanged(t, framework.Widgets, before)
	// It resumed from the saved token: at most the unsaved chunk was
	// written twice (the repeats conflict and count as skipped).
	writes := env.ServerWrites(t, "widgets")
	if writes > n+2*chunk {
		t.Errorf("%d writes to widgets, want at most N + 2 chunks = %d", writes, n+2*chunk)
	}
	if m.Status.Progress.Migrated()+m.Status.Progress.Skipped() < n || m.Status.Progress.Failed != 0 {
		t.Errorf("progress %+v", m.Status.Progress)
	}
	t.Logf("%d objects, %d writes after a kill at %d listed", n, writes, killed.Status.Progress.Listed)
}

func TestImpossibleMigrationsFailFast(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{})
	env.InstallCRDs(t, framework.CRDBasesDir())
	env.StartSVM(t, framework.ControllerArgs("--trigger=false", "--max-parallel", "3")...)
	env.CreateMigration(t, "gadgets", schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"})
	env.CreateMigration(t, "reviews", schema.GroupVersionResource{Group: "authorization.k8s.io", Version: "v1", Resource: "selfsubjectaccessreviews"})
	for name, wantReason := range map[string]string{"gadgets": "ResourceNotFound", "reviews": "NotMigratable"} {
		start := time.Now()
		m := env.WaitMigration(t, name, 30*time.Second, "failed", framework.Failed)
		failed := framework.Condition(m, migrationv1alpha1.MigrationFailed)
		if failed.Reason != wantReason || failed.Message == "" {
			t.Errorf("%s: Failed condition %+v, want reason %s and a message", name, failed, wantReason)
		}
		if took := time.Since(start); took > 15*time.Second {
			t.Errorf("%s took %s to fail", name, took)
		}
	}
	// Failed migrations are not retried: they stay as they are.
	time.Sleep(2 * time.Second)
	if got := env.ServerRequests(t, "PATCH", "storageversionmigrations"); got > 6 {
		t.Errorf("%d status writes for two failed migrations, want a handful (no retry loop)", got)
	}
}

func TestWebhookDenialsFailTheMigrationNamingTheObjects(t *testing.T) {
	t.Parallel()
	const n = 300
	env, _ := setup(t, n)
	denied := map[string]bool{"ns-a/obj-00003": true, "ns-b/obj-00100": true, "ns-c/obj-00299": true}
	hook := framework.StartDenyingWebhook(t, env, framework.WidgetResource, denied)

	env.StartSVM(t, framework.ControllerArgs("--trigger=false")...)
	env.CreateMigration(t, "widgets", framework.Widgets)
	m := env.WaitMigration(t, "widgets", 2*time.Minute, "failed", framework.Failed)

	failed := framework.Condition(m, migrationv1alpha1.MigrationFailed)
	if failed.Reason != "ObjectsFailed" {
		t.Errorf("reason %q, want ObjectsFailed", failed.Reason)
	}
	got := map[string]bool{}
	for _, f := range m.Status.FailedObjects {
		got[f.Namespace+"/"+f.Name] = true
		if !strings.Contains(f.Reason, "denied") {
			t.Errorf("failed object %s: reason %q does not say it was denied", f.Name, f.Reason)
		}
		if !strings.Contains(failed.Message, f.Namespace+"/"+f.Name) {
			t.Errorf("condition message %q does not name %s", failed.Message, f.Name)
		}
	}
	if diff := cmp.Diff(denied, got); diff != "" {
		t.Errorf("failed objects (-want +got):\n%s", diff)
	}
	if p := m.Status.Progress; p.Migrated() != n-3 || p.Failed != 3 {
		t.Errorf("progress %+v, want %d rewritten and 3 failed", p, n-3)
	}
	env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v2": n - 3, "example.com/v1": 3})
	// A denial is final: each denied object was asked once, not retried.
	for key := range denied {
		if calls := hook.Calls(key); calls != 1 {
			t.Errorf("webhook called %d times for %s, want 1", calls, key)
		}
	}
}

func TestControllerWithoutCRDsSaysSo(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{})
	svm := env.StartSVM(t, framework.ControllerArgs("--trigger=false")...)
	if code := svm.ExitCode(); code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	lines := strings.Split(strings.TrimSpace(string(svm.Log(t))), "\n")
	want := "svm: the server does not serve migration.k8s.io/v1alpha1: install svm's CRDs first (kubectl apply -k config/crd)"
	if last := lines[len(lines)-1]; last != want {
		t.Errorf("last line %q, want %q", last, want)
	}
}
