package trigger_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/trigger"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

func widgetMigrations(t *testing.T, env *framework.Env) []migrationv1alpha1.StorageVersionMigration {
	t.Helper()
	var list migrationv1alpha1.StorageVersionMigrationList
	if err := env.Client.List(framework.Context(t, time.Minute), &list); err != nil {
		t.Fatal(err)
	}
	out := slices.DeleteFunc(list.Items, func(m migrationv1alpha1.StorageVersionMigration) bool { return m.Spec.Resource.Resource != "widgets" })
	slices.SortFunc(out, func(a, b migrationv1alpha1.StorageVersionMigration) int {
		return a.CreationTimestamp.Compare(b.CreationTimestamp.Time)
	})
	return out
}

// TestFailedMigrationsStayAndAreRetriedWithGrowingDelay: a triggered
// migration that fails (a webhook denies one object) is kept, and a new one
// follows after a delay that doubles with each failure.
func TestFailedMigrationsStayAndAreRetriedWithGrowingDelay(t *testing.T) {
	t.Parallel()
	env := framework.StartWithWidgets(t, controlplane.Options{}, []string{"default"}, 20)
	framework.StartDenyingWebhook(t, env, framework.WidgetResource, map[string]bool{"default/widget-00007": true})
	env.StartSVM(t, append(args("10m"), "--trigger-retry-delay", "2s")...)

	var failed []migrationv1alpha1.StorageVersionMigration
	err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		failed = slices.DeleteFunc(widgetMigrations(t, env), func(m migrationv1alpha1.StorageVersionMigration) bool {
			return !trigger.IsOwned(&m) || !m.HasCondition(migrationv1alpha1.MigrationFailed)
		})
		return len(failed) >= 3, nil
	})
	if err != nil {
		t.Fatalf("%d failed migrations kept, want at least 3", len(failed))
	}
	// Each retry waited at least the doubled delay after the last failure
	// ended (times have one-second precision).
	for i := 1; i < 3; i++ {
		wantGap := (2 << (i - 1)) * time.Second
		gap := failed[i].CreationTimestamp.Sub(failed[i-1].Status.CompletionTime.Time)
		if gap < wantGap-time.Second {
			t.Errorf("migration %d followed failure %d after %s, want at least %s", i+1, i, gap, wantGap)
		}
	}
	state := waitState(t, env, "state", func(*migrationv1alpha1.StorageState) bool { return true })
	if slices.Equal(state.Status.PersistedStorageVersionHashes, []string{hashV1}) {
		t.Errorf("persisted %v although every migration failed", state.Status.PersistedStorageVersionHashes)
	}
}

// TestUserMigrationSurvivesHashChange: svm stops and deletes only the
// migrations it created; a user's migration is never deleted.
func TestUserMigrationSurvivesHashChange(t *testing.T) {
	t.Parallel()
	env := framework.StartWithWidgets(t, controlplane.Options{}, []string{"default"}, 20)
	env.CreateMigration(t, "mine", framework.Widgets)
	env.StartSVM(t, args("10m")...)
	waitState(t, env, "first migration", persisted(hashV1))
	env.SetCRDStorageVersion(t, framework.WidgetsCRDName, "v2")
	waitState(t, env, "migrated to v2", persisted(hashV2))

	names := []string{}
	for _, m := range widgetMigrations(t, env) {
		names = append(names, m.Name)
	}
	if !slices.Contains(names, "mine") {
		t.Errorf("the user's migration was deleted; widgets migrations now %v", names)
	}
}
