package controller_test

import (
	"bytes"
	"testing"
	"time"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/framework"
)

func TestDeletingAMigrationStopsItsWork(t *testing.T) {
	t.Parallel()
	const n = 3000
	env, _ := setup(t, n)
	env.StartSVM(t, framework.ControllerArgs("--trigger=false", "--qps", "200")...)
	m := env.CreateMigration(t, "widgets", framework.Widgets)
	env.WaitMigration(t, "widgets", time.Minute, "500 listed", func(m *migrationv1alpha1.StorageVersionMigration) bool { return m.Status.Progress.Listed >= 500 })

	if err := env.Client.Delete(framework.Context(t, time.Minute), m); err != nil {
		t.Fatal(err)
	}
	// Writes stop within moments of the deletion.
	time.Sleep(time.Second)
	stoppedAt := env.ServerRequests(t, "PATCH", "widgets")
	time.Sleep(2 * time.Second)
	if after := env.ServerRequests(t, "PATCH", "widgets"); after != stoppedAt {
		t.Errorf("writes went on after the migration was deleted: %d -> %d", stoppedAt, after)
	}
	if stoppedAt >= n {
		t.Fatalf("migration finished (%d writes) before it was deleted; the test proves nothing", stoppedAt)
	}
	// The resource is free again: a new migration completes it.
	env.CreateMigration(t, "widgets-again", framework.Widgets)
	env.WaitMigrationSucceeded(t, "widgets-again", 2*time.Minute)
	env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v2": n})
}

func TestSIGTERMDrainsAndTheNextControllerResumes(t *testing.T) {
	t.Parallel()
	const n, chunk = 3000, 500
	env, before := setup(t, n)
	args := framework.ControllerArgs("--trigger=false", "--qps", "300")
	svm := env.StartSVM(t, args...)
	env.CreateMigration(t, "widgets", framework.Widgets)
	// A chunk is saved in two writes, its counters and then its token
	// (see the controller's OnChunk): wait for both, or a SIGTERM between
	// them leaves no token to resume from and the check below fails.
	env.WaitMigration(t, "widgets", time.Minute, "a chunk saved", func(m *migrationv1alpha1.StorageVersionMigration) bool {
		return m.Status.Progress.Listed >= chunk && m.Spec.ContinueToken != ""
	})

	start := time.Now()
	if !svm.Stop(15 * time.Second) {
		t.Fatal("controller did not exit within 15s of SIGTERM")
	}
	if code := svm.ExitCode(); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	t.Logf("drained in %s", time.Since(start).Round(time.Millisecond))
	stopped := env.GetMigration(t, "widgets")
	if !stopped.HasCondition(migrationv1alpha1.MigrationRunning) || stopped.Spec.ContinueToken == "" {
		t.Fatalf("after SIGTERM: conditions %+v, token %q; want Running with a saved token", stopped.Status.Conditions, stopped.Spec.ContinueToken)
	}

	env.StartSVM(t, args...)
	env.WaitMigrationSucceeded(t, "widgets", 3*time.Minute)
	env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v2": n})
	env.ExpectUnchanged(t, framework.Widgets, before)
	if writes := env.ServerRequests(t, "PATCH", "widgets"); writes > n+chunk {
		t.Errorf("%d writes, want at most N + 1 chunk = %d after a clean drain", writes, n+chunk)
	}
}

func TestOnlyTheLeaderMigrates(t *testing.T) {
	t.Parallel()
	const n = 1000
	env, _ := setup(t, n)
	first := env.StartSVM(t, framework.ControllerArgs("--trigger=false")...)
	second := env.StartSVM(t, framework.ControllerArgs("--trigger=false")...)
	env.CreateMigration(t, "widgets", framework.Widgets)
	env.WaitMigrationSucceeded(t, "widgets", 2*time.Minute)

	started := 0
	for _, p := range []*framework.Process{first, second} {
		started += bytes.Count(p.Log(t), []byte(`"Migration started"`))
	}
	if started != 1 {
		t.Errorf("%d replicas started the migration, want exactly 1", started)
	}
	if writes := env.ServerRequests(t, "PATCH", "widgets"); writes != n {
		t.Errorf("%d writes, want %d", writes, n)
	}
}
