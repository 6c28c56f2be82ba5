package controller_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/framework"
)

func TestDeletingAMigrationStopsItsWork(t *testing.T) {
	t.Parallel()
	const n, chunk = 1200, 200
	env, _ := setup(t, n)
	env.StartSVM(t, framework.ControllerArgs("--trigger=false", "--qps", "80", "--chunk-size", fmt.Sprint(chunk))...)
	m := env.CreateMigration(t, "widgets", framework.Widgets)
	env.WaitMigration(t, "widgets", time.Minute, "a chunk listed", func(m *migrationv1alpha1.StorageVersionMigration) bool { return m.Status.Progress.Listed >= chunk })

	if err := env.Client.Delete(framework.Context(t, time.Minute), m); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	if atDelete := env.ServerWrites(t, "widgets"); atDelete >= n {
		t.Fatalf("migration finished (%d writes) before it was deleted; the test proves nothing", atDelete)
	}
	// Writes stop soon after the deletion, before the migration could
	// have ended (the rest takes over 12s at --qps 80, and longer on a
	// busy machine): svm sees the deletion through its informer and
	// cancels the writes in flight, which on a busy machine takes a
	// moment or two. Stopped means no write for 2s.
	writes := func() int { return env.ServerWrites(t, "widgets") }
	stoppedAt, changed := writes(), time.Now()
	for time.Since(changed) < 2*time.Second {
		if time.Since(deleted) > 20*time.Second {
			t.Fatalf("writes went on for 20s after the migration was deleted: %d so far", stoppedAt)
		}
		time.Sleep(250 * time.Millisecond)
		if w := writes(); w != stoppedAt {
			stoppedAt, changed = w, time.Now()
		}
	}
	t.Logf("writes stopped %s after the deletion, at %d", changed.Sub(deleted).Round(time.Millisecond), stoppedAt)
	if stoppedAt >= n {
		t.Fatalf("%d writes: every widget was written after the migration was deleted", stoppedAt)
	}
	// The resource is free again: a new migration completes it. It may be
	// slow on a busy machine, but must not stand still.
	env.CreateMigration(t, "widgets-again", framework.Widgets)
	again := env.WaitMigrationMoving(t, "widgets-again", time.Minute, 10*time.Minute, "finished", framework.Finished)
	if !framework.Succeeded(again) {
		t.Fatalf("migration widgets-again failed: %+v", again.Status.Conditions)
	}
	env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v2": n})
}

func TestSIGTERMDrainsAndTheNextControllerResumes(t *testing.T) {
	t.Parallel()
	const n, chunk = 1200, 200
	env, before := setup(t, n)
	args := framework.ControllerArgs("--trigger=false", "--qps", "120", "--chunk-size", fmt.Sprint(chunk))
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
	if writes := env.ServerWrites(t, "widgets"); writes > n+chunk {
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
	if writes := env.ServerWrites(t, "widgets"); writes != n {
		t.Errorf("%d writes, want %d", writes, n)
	}
}
