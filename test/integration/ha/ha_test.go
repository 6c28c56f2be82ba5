// Package ha_test shows svm correct while API servers do not agree on a
// resource's storage version: during a rolling upgrade of a highly
// available control plane (two kube-apiserver processes on one etcd), and
// when a storage version changes while a migration runs. Every outcome is
// checked in etcd's raw values.
package ha_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

var (
	widgetsPrefix = framework.EtcdPrefix(framework.Widgets.GroupResource())
	hashV1        = resources.StorageVersionHash(framework.Widgets.Group, "v1", "Widget")
	hashV2        = resources.StorageVersionHash(framework.Widgets.Group, "v2", "Widget")
)

// TestStorageVersionChangedDuringAMigrationIsRedone flips the widgets'
// storage version back while a migration to the new one runs: the objects
// it rewrote before the flip are in the version no longer written. The
// migration must not succeed on that; it starts over and ends with every
// object in the storage version of its end.
func TestStorageVersionChangedDuringAMigrationIsRedone(t *testing.T) {
	t.Parallel()
	const n = 400
	env := framework.StartWithWidgets(t, controlplane.Options{}, []string{"ns-a", "ns-b"}, n)
	before := env.TakeSnapshot(t, framework.Widgets)
	env.SetCRDStorageVersion(t, framework.WidgetsCRDName, "v2")
	env.WaitStorageVersionHashChange(t, framework.Widgets, hashV1)

	// 400 objects at 100 per second: four seconds to flip back in.
	env.StartSVM(t, "controller", "--trigger=false", "--leader-elect=false", "--metrics-bind-address", "0",
		"--health-probe-bind-address", "0", "--qps", "100", "--chunk-size", "50")
	writes := env.ServerWrites(t, "widgets")
	env.CreateMigration(t, "widgets", framework.Widgets)
	env.WaitMigration(t, "widgets", 3*time.Minute, "a quarter migrated", func(m *migrationv1alpha1.StorageVersionMigration) bool {
		return m.Status.Progress.Listed >= n/4
	})
	env.SetCRDStorageVersion(t, framework.WidgetsCRDName, "v1")
	env.WaitStorageVersionHashChange(t, framework.Widgets, hashV2)
	if m := env.GetMigration(t, "widgets"); m.IsFinished() {
		t.Fatalf("the migration finished before the flip back (%+v): the test proves nothing", m.Status.Progress)
	}

	m := env.WaitMigration(t, "widgets", 3*time.Minute, "finished", framework.Finished)
	if !framework.Succeeded(m) {
		t.Fatalf("migration ended %+v, want Succeeded after starting over", m.Status.Conditions)
	}
	if m.Status.StorageVersionHash != hashV1 || !strings.Contains(m.Status.StorageFingerprint, "/v1") {
		t.Errorf("the migration succeeded for hash %s, fingerprint %q; want the storage version of its end, v1 (%s)", m.Status.StorageVersionHash, m.Status.StorageFingerprint, hashV1)
	}
	if reasons := framework.EventReasons(env.Events(t, "StorageVersionMigration", "widgets")); reasons["Warning/StorageVersionChanged"] == 0 {
		t.Errorf("no StorageVersionChanged event on the migration: %v", reasons)
	}
	env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v1": n})
	env.ExpectUnchanged(t, framework.Widgets, before)
	w := env.ServerWrites(t, "widgets") - writes
	// The first pass up to the flip, then every object once more.
	if w > 2*n {
		t.Errorf("%d writes for %d objects, want at most two passes", w, n)
	}
	framework.Scenario{Name: "storage version flipped back mid-migration", Objects: n, Writes: w, Retries: -1, Verified: !t.Failed()}.Report(t)
}

// TestCRDSettleDelay: after a CRD's storage version changes, the trigger
// records the new hash at once but creates the migration only after the
// settle delay, so that an API server that sees the change late has
// stopped writing the old version before the migration's list begins.
func TestCRDSettleDelay(t *testing.T) {
	t.Parallel()
	env := framework.StartWithWidgets(t, controlplane.Options{}, []string{"ns-a"}, 20)
	const settle = 8 * time.Second
	env.StartSVM(t, "controller", "--leader-elect=false", "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		"--crd-drain-margin", framework.TestDrainMargin.String(), "--trigger-interval", "1s", "--crd-settle-delay", settle.String())
	env.WaitStorageState(t, framework.Widgets.GroupResource(), 2*time.Minute, "first migration", func(s *migrationv1alpha1.StorageState) bool {
		return slices.Equal(s.Status.PersistedStorageVersionHashes, []string{hashV1})
	})

	env.SetCRDStorageVersion(t, framework.WidgetsCRDName, "v2")
	seen := env.WaitStorageState(t, framework.Widgets.GroupResource(), 2*time.Minute, "the new hash recorded", func(s *migrationv1alpha1.StorageState) bool {
		return s.Status.CurrentStorageVersionHash == hashV2
	})
	if seen.Status.CurrentStorageVersionSince == nil {
		t.Fatalf("the StorageState does not say since when it has seen hash %s: %+v", hashV2, seen.Status)
	}
	since := seen.Status.CurrentStorageVersionSince.Time
	var created time.Time
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, m := range listMigrations(t, env) {
			if m.Annotations["migration.k8s.io/storage-version-hash"] == hashV2 {
				created = m.CreationTimestamp.Time
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no migration to %s within a minute", hashV2)
	}
	// Times are stored in whole seconds.
	if waited := created.Sub(since); waited < settle-time.Second {
		t.Errorf("the migration was created %s after the hash was seen, want the settle delay, %s", waited, settle)
	} else {
		t.Logf("migration created %s after the hash change was seen (settle delay %s)", waited, settle)
	}
	env.WaitStorageState(t, framework.Widgets.GroupResource(), 2*time.Minute, "migrated to v2", func(s *migrationv1alpha1.StorageState) bool {
		return slices.Equal(s.Status.PersistedStorageVersionHashes, []string{hashV2})
	})
	env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v2": 20})
}

func listMigrations(t *testing.T, env *framework.Env) []migrationv1alpha1.StorageVersionMigration {
	t.Helper()
	var list migrationv1alpha1.StorageVersionMigrationList
	if err := env.Client.List(framework.Context(t, time.Minute), &list); err != nil {
		t.Fatalf("list migrations: %v", err)
	}
	return list.Items
}
