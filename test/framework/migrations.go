package framework

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
)

// ControllerArgs are the arguments of `svm controller` in a test: the
// lease in default, and no metrics or health endpoints, so that tests
// running side by side never fight over a port. extra follow them.
//
// The drain margin is TestDrainMargin: a test control plane holds no
// write across a CRD change, but for the tests of the margin itself,
// which start their API server with a request timeout to match and set
// the margin that timeout calls for.
func ControllerArgs(extra ...string) []string {
	return append([]string{"controller", "--leader-election-namespace", "default",
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--crd-drain-margin", TestDrainMargin.String()}, extra...)
}

// TestDrainMargin is the drain margin (svm controller's and svm retire's
// --crd-drain-margin, migrate.Options.CRDDrainMargin) of tests that hold
// no write across a CRD change (see ControllerArgs): the default, twice
// kube-apiserver's default request timeout, would add two minutes to every
// CRD migration the trigger starts and every retirement right after a
// flip.
const TestDrainMargin = time.Second

// CreateMigration creates a StorageVersionMigration of gvr named name, as
// a user would, and returns it.
func (e *Env) CreateMigration(t testing.TB, name string, gvr schema.GroupVersionResource) *migrationv1alpha1.StorageVersionMigration {
	t.Helper()
	m := &migrationv1alpha1.StorageVersionMigration{}
	m.Name = name
	m.Spec.Resource = migrationv1alpha1.GroupVersionResource{Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource}
	if err := e.Client.Create(Context(t, time.Minute), m); err != nil {
		t.Fatalf("create migration %s: %v", name, err)
	}
	return m
}

// GetMigration reads the migration named name.
func (e *Env) GetMigration(t testing.TB, name string) *migrationv1alpha1.StorageVersionMigration {
	t.Helper()
	m := &migrationv1alpha1.StorageVersionMigration{}
	if err := e.Client.Get(Context(t, time.Minute), client.ObjectKey{Name: name}, m); err != nil {
		t.Fatalf("get migration %s: %v", name, err)
	}
	return m
}

// WaitMigration polls the migration named name, as `kubectl wait` would,
// until cond holds, and returns it. It fails the test after timeout,
// naming what was awaited and the migration's last status. Errors reading
// it (the API server may be down on purpose) count as "not yet".
func (e *Env) WaitMigration(t testing.TB, name string, timeout time.Duration, what string, cond func(*migrationv1alpha1.StorageVersionMigration) bool) *migrationv1alpha1.StorageVersionMigration {
	t.Helper()
	// Standing still for as long as the whole wait can never end it first.
	return e.WaitMigrationMoving(t, name, timeout, timeout, what, cond)
}

// WaitMigrationMoving polls the migration named name until cond holds,
// and returns it, for as long as the migration moves: it fails the test
// once the migration's saved progress and conditions have stood still
// for stall, or once limit has passed. A test that proves a migration
// completes by itself through crashes and outages waits this way: on
// two cores shared with other suites, a migration that the API server
// answers slowly (and svm's pacing slows further) is late, not stuck,
// and a fixed deadline cannot tell the two apart.
func (e *Env) WaitMigrationMoving(t testing.TB, name string, stall, limit time.Duration, what string, cond func(*migrationv1alpha1.StorageVersionMigration) bool) *migrationv1alpha1.StorageVersionMigration {
	t.Helper()
	var last *migrationv1alpha1.StorageVersionMigration
	var lastErr error
	start, moved := time.Now(), time.Now()
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, limit, true, func(ctx context.Context) (bool, error) {
		m := &migrationv1alpha1.StorageVersionMigration{}
		if lastErr = e.Client.Get(ctx, client.ObjectKey{Name: name}, m); lastErr == nil {
			if last == nil || movement(last) != movement(m) {
				moved = time.Now()
			}
			last = m
			if cond(m) {
				return true, nil
			}
		}
		if since := time.Since(moved); since > stall {
			return false, fmt.Errorf("stood still for %s", since.Round(time.Second))
		}
		return false, nil
	})
	if err != nil {
		if last == nil {
			t.Fatalf("migration %s: not %s after %s; never read: %v (%v)", name, what, time.Since(start).Round(time.Second), lastErr, err)
		}
		t.Fatalf("migration %s: not %s after %s (%v; last error: %v); spec %+v, progress %+v, conditions %+v",
			name, what, time.Since(start).Round(time.Second), err, lastErr, last.Spec, last.Status.Progress, last.Status.Conditions)
	}
	return last
}

// movement is what changes when a migration moves: its saved place in the
// list, its counts and its conditions (not their times, which a stuck
// controller might refresh).
func movement(m *migrationv1alpha1.StorageVersionMigration) string {
	p := m.Status.Progress
	key := fmt.Sprintf("%s|%d|%d|%d|%d|", m.Spec.ContinueToken, p.Listed, p.Migrated(), p.Skipped(), p.Failed)
	for _, c := range m.Status.Conditions {
		key += fmt.Sprintf("%s=%s/%s|", c.Type, c.Status, c.Reason)
	}
	return key
}

// WaitMigrationSucceeded waits until the migration named name has
// succeeded, failing the test at once if it fails instead.
func (e *Env) WaitMigrationSucceeded(t testing.TB, name string, timeout time.Duration) *migrationv1alpha1.StorageVersionMigration {
	t.Helper()
	m := e.WaitMigration(t, name, timeout, "finished", Finished)
	if !Succeeded(m) {
		t.Fatalf("migration %s failed: %+v", name, m.Status.Conditions)
	}
	return m
}

// Succeeded reports whether m's Succeeded condition is True.
func Succeeded(m *migrationv1alpha1.StorageVersionMigration) bool {
	return m.HasCondition(migrationv1alpha1.MigrationSucceeded)
}

// Failed reports whether m's Failed condition is True.
func Failed(m *migrationv1alpha1.StorageVersionMigration) bool {
	return m.HasCondition(migrationv1alpha1.MigrationFailed)
}

// Finished reports whether m has succeeded or failed.
func Finished(m *migrationv1alpha1.StorageVersionMigration) bool { return m.IsFinished() }

// Condition returns m's condition of type ct, or the zero condition.
func Condition(m *migrationv1alpha1.StorageVersionMigration, ct migrationv1alpha1.MigrationConditionType) migrationv1alpha1.MigrationCondition {
	for _, c := range m.Status.Conditions {
		if c.Type == ct {
			return c
		}
	}
	return migrationv1alpha1.MigrationCondition{}
}

// WaitStorageState polls gr's StorageState until cond holds, and returns
// it; it fails the test after timeout with the state's last status.
func (e *Env) WaitStorageState(t testing.TB, gr schema.GroupResource, timeout time.Duration, what string, cond func(*migrationv1alpha1.StorageState) bool) *migrationv1alpha1.StorageState {
	t.Helper()
	name := migrationv1alpha1.StorageStateName(migrationv1alpha1.GroupResource{Group: gr.Group, Resource: gr.Resource})
	var last *migrationv1alpha1.StorageState
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		s := &migrationv1alpha1.StorageState{}
		if err := e.Client.Get(ctx, client.ObjectKey{Name: name}, s); err != nil {
			return false, nil
		}
		last = s
		return cond(s), nil
	})
	if err != nil {
		if last == nil {
			t.Fatalf("storage state %s: not %s within %s; never read", name, what, timeout)
		}
		t.Fatalf("storage state %s: not %s within %s; status %+v", name, what, timeout, last.Status)
	}
	return last
}

// WaitMigrationsFinished waits until every StorageVersionMigration has
// Succeeded or Failed, as after svm controller's first round of triggered
// migrations, so that what a test does next is not mixed with them.
func (e *Env) WaitMigrationsFinished(t testing.TB, timeout time.Duration) {
	t.Helper()
	var running []string
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var list migrationv1alpha1.StorageVersionMigrationList
		if err := e.Client.List(ctx, &list); err != nil {
			return false, nil
		}
		running = running[:0]
		for i := range list.Items {
			if !list.Items[i].IsFinished() {
				running = append(running, list.Items[i].Name)
			}
		}
		return len(list.Items) > 0 && len(running) == 0, nil
	})
	if err != nil {
		t.Fatalf("migrations not all finished within %s; unfinished: %v", timeout, running)
	}
}

// Migrations lists every StorageVersionMigration.
func (e *Env) Migrations(t testing.TB) []migrationv1alpha1.StorageVersionMigration {
	t.Helper()
	var list migrationv1alpha1.StorageVersionMigrationList
	if err := e.Client.List(Context(t, time.Minute), &list); err != nil {
		t.Fatalf("list migrations: %v", err)
	}
	return list.Items
}

// Eventually polls cond until it returns true, and fails the test after
// timeout naming what was awaited. An error from cond ends the wait and
// fails the test at once.
func Eventually(t testing.TB, what string, timeout time.Duration, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, timeout, true, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
