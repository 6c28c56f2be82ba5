// Package trigger_test runs `svm controller` with its triggering controller
// against a real control plane and follows the StorageState life-cycle of
// the automated migration design, on a custom resource.
package trigger_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/internal/trigger"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

const stateName = "widgets.example.com"

var (
	hashV1 = resources.StorageVersionHash("example.com", "v1", "Widget")
	hashV2 = resources.StorageVersionHash("example.com", "v2", "Widget")
)

// args run one replica without leader election: a replica killed with
// SIGKILL keeps its lease until it expires, which would only slow the test.
func args(staleAfter string) []string {
	return framework.ControllerArgs("--leader-elect=false",
		"--max-parallel", "4", "--trigger-interval", "2s", "--storage-state-stale-after", staleAfter,
		// One control plane: one API server to settle. TestCRDSettleDelay
		// tests the wait itself.
		"--crd-settle-delay", "1s",
		// These tests count svm's migrations of a resource over its life:
		// the history keeps them all (internal/controller/history).
		"--succeeded-migrations-kept", "100", "--failed-migrations-kept", "100")
}

// waitState waits up to two minutes for the widgets' StorageState to
// satisfy cond.
func waitState(t *testing.T, env *framework.Env, what string, cond func(*migrationv1alpha1.StorageState) bool) *migrationv1alpha1.StorageState {
	t.Helper()
	return env.WaitStorageState(t, framework.Widgets.GroupResource(), 2*time.Minute, what, cond)
}

func persisted(want ...string) func(*migrationv1alpha1.StorageState) bool {
	return func(s *migrationv1alpha1.StorageState) bool {
		return cmp.Equal(want, s.Status.PersistedStorageVersionHashes)
	}
}

// ownedMigrations are svm's migrations of widgets, by target hash.
func ownedMigrations(t *testing.T, env *framework.Env) map[string]int {
	t.Helper()
	var list migrationv1alpha1.StorageVersionMigrationList
	if err := env.Client.List(framework.Context(t, time.Minute), &list); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for i := range list.Items {
		m := &list.Items[i]
		if m.Spec.Resource.Resource == "widgets" && trigger.IsOwned(m) {
			out[trigger.TargetHash(m)]++
		}
	}
	return out
}

func TestStorageStateLifecycle(t *testing.T) {
	t.Parallel()
	const n = 200
	env := framework.StartWithWidgets(t, controlplane.Options{}, []string{"ns-a", "ns-b"}, n)
	prefix := framework.EtcdPrefix(framework.Widgets.GroupResource())

	// First install: ["Unknown"] and a migration, then the v1 hash alone.
	svm := env.StartSVM(t, args("30s")...)
	waitState(t, env, "first install", func(s *migrationv1alpha1.StorageState) bool {
		return s.Status.CurrentStorageVersionHash == hashV1
	})
	waitState(t, env, "first migration", persisted(hashV1))
	if got := ownedMigrations(t, env); got[hashV1] != 1 {
		t.Errorf("svm's migrations by hash %v, want one to v1", got)
	}

	// Down for less than the staleness window: only the heartbeat moves.
	svm.Kill()
	before := waitState(t, env, "before restart", persisted(hashV1))
	svm = env.StartSVM(t, args("30s")...)
	waitState(t, env, "heartbeat after a short outage", func(s *migrationv1alpha1.StorageState) bool {
		return s.Status.LastHeartbeatTime.After(before.Status.LastHeartbeatTime.Time)
	})
	after := waitState(t, env, "after restart", persisted(hashV1))
	if after.UID != before.UID {
		t.Error("storage state was re-created after an outage shorter than the window")
	}

	// Storage flipped to v2: both hashes, a new migration, then v2 alone.
	env.SetCRDStorageVersion(t, framework.WidgetsCRDName, "v2")
	waitState(t, env, "flip to v2", func(s *migrationv1alpha1.StorageState) bool {
		return s.Status.CurrentStorageVersionHash == hashV2
	})
	waitState(t, env, "migrated to v2", persisted(hashV2))
	env.ExpectStored(t, prefix, map[string]int{"example.com/v2": n})

	// Flipped back: a new migration to v1, verified in etcd.
	env.SetCRDStorageVersion(t, framework.WidgetsCRDName, "v1")
	waitState(t, env, "migrated back to v1", func(s *migrationv1alpha1.StorageState) bool {
		return s.Status.CurrentStorageVersionHash == hashV1 && cmp.Equal([]string{hashV1}, s.Status.PersistedStorageVersionHashes)
	})
	env.ExpectStored(t, prefix, map[string]int{"example.com/v1": n})
	if diff := cmp.Diff(map[string]int{hashV1: 2, hashV2: 1}, ownedMigrations(t, env)); diff != "" {
		t.Errorf("svm's migrations by target hash (-want +got):\n%s", diff)
	}

	// Down for longer than the window: reset to ["Unknown"], re-migrated.
	svm.Kill()
	stale := waitState(t, env, "before long outage", persisted(hashV1))
	time.Sleep(31 * time.Second)
	restarted := env.StartSVM(t, args("30s")...)
	reset := waitState(t, env, "reset after a long outage", func(s *migrationv1alpha1.StorageState) bool {
		return s.UID != stale.UID && len(s.Status.PersistedStorageVersionHashes) > 0
	})
	if !cmp.Equal([]string{hashV1}, reset.Status.PersistedStorageVersionHashes) && !cmp.Equal([]string{migrationv1alpha1.UnknownStorageVersionHash}, reset.Status.PersistedStorageVersionHashes) {
		t.Errorf("re-created state persisted %v, want [Unknown] until re-migrated", reset.Status.PersistedStorageVersionHashes)
	}
	// The value ["Unknown"] may be replaced before a poll sees it; the
	// controller's own record of the reset is what proves it happened.
	resetLogged := false
	for _, line := range strings.Split(string(restarted.Log(t)), "\n") {
		resetLogged = resetLogged || strings.Contains(line, `"Resetting stale storage state"`) && strings.Contains(line, `storageState="widgets.example.com"`)
	}
	if !resetLogged {
		t.Error("the restarted controller did not log resetting the stale storage state")
	}
	waitState(t, env, "re-migrated after reset", persisted(hashV1))
	if got := ownedMigrations(t, env); got[hashV1] != 3 {
		t.Errorf("svm's migrations by hash %v, want a third to v1 after the reset", got)
	}
	env.ExpectStored(t, prefix, map[string]int{"example.com/v1": n})
}
