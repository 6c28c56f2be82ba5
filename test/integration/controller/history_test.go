package controller_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/followup"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// finishedMigration creates a migration of gvr named name and writes its
// status as finished (Succeeded, or Failed when failed) ago before now,
// as a migration that ran earlier leaves it: one the trigger made, unless
// its name starts with "user-".
func finishedMigration(t *testing.T, env *framework.Env, name string, gvr schema.GroupVersionResource, failed bool, ago time.Duration) {
	t.Helper()
	env.CreateMigration(t, name, gvr)
	m := env.GetMigration(t, name)
	if !strings.HasPrefix(name, "user-") {
		m.Labels = map[string]string{followup.CreatedByLabel: followup.TriggerValue}
		if err := env.Client.Update(framework.Context(t, time.Minute), m); err != nil {
			t.Fatalf("label migration %s as the trigger's: %v", name, err)
		}
	}
	end := metav1.NewTime(time.Now().Add(-ago).Truncate(time.Second))
	start := metav1.NewTime(end.Add(-30 * time.Second))
	typ, reason := migrationv1alpha1.MigrationSucceeded, "AllObjectsRewritten"
	if failed {
		typ, reason = migrationv1alpha1.MigrationFailed, "ObjectsFailed"
	}
	m.Status.StartTime, m.Status.CompletionTime, m.Status.StorageVersionHash = &start, &end, "hash"
	m.Status.Conditions = []migrationv1alpha1.MigrationCondition{
		{Type: typ, Status: corev1.ConditionTrue, LastUpdateTime: end, Reason: reason, Message: "written by the test"},
		{Type: migrationv1alpha1.MigrationRunning, Status: corev1.ConditionFalse, LastUpdateTime: end, Reason: reason},
	}
	if err := env.Client.Status().Update(framework.Context(t, time.Minute), m); err != nil {
		t.Fatalf("write the status of migration %s: %v", name, err)
	}
}

// migrationNames are the names of the migrations of resource, sorted,
// read from the API server.
func migrationNames(t *testing.T, env *framework.Env, resource string) []string {
	t.Helper()
	var names []string
	for _, m := range env.Migrations(t) {
		if m.Spec.Resource.Resource == resource {
			names = append(names, m.Name)
		}
	}
	slices.Sort(names)
	return names
}

// waitMigrationNames waits until the migrations of each resource are the
// names want gives it, then checks that they stay so (nothing more is
// deleted, and no delete goes on and on).
func waitMigrationNames(t *testing.T, env *framework.Env, want map[string][]string) {
	t.Helper()
	same := func() bool {
		for resource, names := range want {
			if !slices.Equal(migrationNames(t, env, resource), names) {
				return false
			}
		}
		return true
	}
	framework.Eventually(t, "the history kept", time.Minute, func(context.Context) (bool, error) { return same(), nil })
	time.Sleep(3 * time.Second)
	for resource, names := range want {
		if diff := cmp.Diff(names, migrationNames(t, env, resource)); diff != "" {
			t.Errorf("migrations of %s, a while after the history was kept (-want +got):\n%s", resource, diff)
		}
	}
}

// TestFinishedMigrationsBeyondTheHistoryAreDeleted: svm controller keeps,
// per resource, the newest --succeeded-migrations-kept Succeeded and
// --failed-migrations-kept Failed migrations, never deletes a user's, and the
// failures since the resource's last success (the trigger's retry delay
// counts them), and deletes the other finished ones: at start, and when
// another of the resource's migrations finishes.
func TestFinishedMigrationsBeyondTheHistoryAreDeleted(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{})
	env.InstallCRDs(t, framework.CRDBasesDir())
	gadgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}
	configMaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

	// Gadgets: a user's success and failure, then six successes and three
	// failures of the trigger's, the last after every success, oldest
	// first.
	for i, name := range []string{"user-g-ok", "user-g-failed", "g-ok-1", "g-failed-1", "g-ok-2", "g-failed-2", "g-ok-3", "g-ok-4", "g-ok-5", "g-ok-6", "g-failed-3"} {
		finishedMigration(t, env, name, gadgets, strings.Contains(name, "failed"), time.Duration(110-10*i)*time.Minute)
	}
	// ConfigMaps: two successes, then two failures in a row: the limits
	// alone would keep one failure, the row keeps both.
	for i, name := range []string{"c-ok-1", "c-ok-2", "c-failed-1", "c-failed-2"} {
		finishedMigration(t, env, name, configMaps, strings.Contains(name, "failed"), time.Duration(90-10*i)*time.Minute)
	}

	env.StartSVM(t, framework.ControllerArgs("--trigger=false", "--succeeded-migrations-kept", "2", "--failed-migrations-kept", "1")...)
	waitMigrationNames(t, env, map[string][]string{
		"gadgets":    {"g-failed-3", "g-ok-5", "g-ok-6", "user-g-failed", "user-g-ok"},
		"configmaps": {"c-failed-1", "c-failed-2", "c-ok-1", "c-ok-2"},
	})

	// A ConfigMaps migration that succeeds now ends the row of failures:
	// the two newest successes and the newest failure are kept.
	env.CreateMigration(t, "c-ok-now", configMaps)
	env.WaitMigrationSucceeded(t, "c-ok-now", 2*time.Minute)
	waitMigrationNames(t, env, map[string][]string{
		"gadgets":    {"g-failed-3", "g-ok-5", "g-ok-6", "user-g-failed", "user-g-ok"},
		"configmaps": {"c-failed-2", "c-ok-2", "c-ok-now"},
	})
	// Each was deleted once; a look from a cache that had not yet seen
	// the deletes of the one before may repeat some (and be told they are
	// gone), but no look repeats on its own.
	if deletes := env.ServerRequests(t, "DELETE", "storageversionmigrations"); deletes < 8 || deletes > 8+2 {
		t.Errorf("%d deletes of migrations, want the 8 deleted, each once or so", deletes)
	}
}
