// Package intree_test runs svm controller beside a real
// kube-controller-manager, whose in-tree storage version migrator executes
// storagemigration.k8s.io/v1 migrations: svm hands its triggered
// migrations to it when it acts, and otherwise executes them itself
// without ever rewriting a resource beside it.
package intree_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/intree"
	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

var (
	widgetsPrefix = framework.EtcdPrefix(framework.Widgets.GroupResource())
	widgetsGR     = framework.Widgets.GroupResource()
	hashV1        = resources.StorageVersionHash("example.com", "v1", "Widget")
	hashV2        = resources.StorageVersionHash("example.com", "v2", "Widget")
)

// setup starts a control plane with kube-controller-manager and n widgets
// stored in v1, and returns their content.
func setup(t *testing.T, n int) (*framework.Env, framework.Snapshot) {
	t.Helper()
	env := framework.StartWithWidgets(t, controlplane.Options{ControllerManager: true}, []string{"ns-a", "ns-b"}, n)
	return env, env.TakeSnapshot(t, framework.Widgets)
}

// widgetWrites are svm's writes (PUT, or PATCH for managedFields) to widgets that went through p,
// with their times.
func widgetWrites(p *framework.Proxy) []time.Time {
	var out []time.Time
	for _, e := range p.Events() {
		if (e.Method == "PUT" || e.Method == "PATCH") && strings.HasPrefix(e.Path, "/apis/example.com/") && strings.Contains(e.Path, "/widgets/") {
			out = append(out, e.Time)
		}
	}
	return out
}

// waitLog waits until svm's log says want.
func waitLog(t *testing.T, p *framework.Process, want string, timeout time.Duration) {
	t.Helper()
	framework.Eventually(t, fmt.Sprintf("svm logging %q", want), timeout, func(context.Context) (bool, error) {
		return strings.Contains(string(p.Log(t)), want), nil
	})
}

func crd(t *testing.T, env *framework.Env) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	c := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(framework.Context(t, time.Minute), client.ObjectKey{Name: framework.WidgetsCRDName}, c); err != nil {
		t.Fatal(err)
	}
	return c
}

func inTreeMigrations(t *testing.T, env *framework.Env) []storagemigrationv1.StorageVersionMigration {
	t.Helper()
	list, err := env.Kube.StoragemigrationV1().StorageVersionMigrations().List(framework.Context(t, time.Minute), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// TestTriggerHandsMigrationsToKubeControllerManager: with
// kube-controller-manager acting on in-tree migrations, svm controller at
// its defaults notices a CRD storage flip and kube-controller-manager
// executes it. svm writes no widget itself, every etcd value ends in v2
// with its content unchanged, storedVersions ends [v2] and the
// StorageState records the new hash alone.
func TestTriggerHandsMigrationsToKubeControllerManager(t *testing.T) {
	t.Parallel()
	const n = 300
	env, before := setup(t, n)
	proxy := env.StartProxy(t)
	// kube-controller-manager takes a minute or two over each migration of
	// a resource nobody writes (it waits for its garbage collector's cache
	// to catch up): have svm hand them all over at once.
	svm := proxy.StartSVM(t, framework.ControllerArgs("--max-parallel", "100", "--trigger-interval", "2s", "--crd-settle-delay", "1s")...)
	waitLog(t, svm, `executor="in-tree"`, time.Minute)

	// The first sight of widgets is migrated too, by kube-controller-manager
	// or, when its workers are all busy with svm's hand-overs, by svm's
	// engine. The flip comes once the first-sight round has ended: its
	// migration then finds a worker free and is handed over.
	env.WaitStorageState(t, widgetsGR, 5*time.Minute, "migrated to v1 at first sight", func(s *migrationv1alpha1.StorageState) bool {
		return slices.Equal(s.Status.PersistedStorageVersionHashes, []string{hashV1})
	})
	env.WaitMigrationsFinished(t, 10*time.Minute)
	firstSightWrites := len(widgetWrites(proxy))
	env.SetStorage(t, framework.WidgetResource, "v2")
	flipped := time.Now()
	// kube-controller-manager pruned storedVersions when its first
	// migration of widgets succeeded, and owns them since: it must not cut
	// them when it starts the next one, before it has rewritten anything
	// (svm keeps them, see CRDMarker.KeepStoredVersions).
	env.WaitPrunedSafely(t, framework.WidgetResource, "v1", 5*time.Minute)
	env.WaitStorageState(t, widgetsGR, 5*time.Minute, "migrated to v2 after the flip", func(s *migrationv1alpha1.StorageState) bool {
		return s.Status.CurrentStorageVersionHash == hashV2 && slices.Equal(s.Status.PersistedStorageVersionHashes, []string{hashV2})
	})

	t.Logf("kube-controller-manager migrated %d widgets %s after the flip", n, time.Since(flipped).Round(time.Second))
	env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v2": n})
	env.ExpectUnchanged(t, framework.Widgets, before)
	if got := env.CRDStoredVersions(t, framework.WidgetsCRDName); !slices.Equal(got, []string{"v2"}) {
		t.Errorf("storedVersions %v, want [v2]", got)
	}
	// kube-controller-manager prunes storedVersions whatever the widgets'
	// managedFields name: svm moved them off v1 before it handed over.
	if diff := cmp.Diff(map[string]int{"example.com/v2": n}, env.ManagedFieldsVersions(t, widgetsPrefix)); diff != "" {
		t.Errorf("managedFields in etcd (-want +got):\n%s", diff)
	}
	// Someone did write them: kube-controller-manager, through the
	// in-tree migrations svm created, one per svm migration of widgets.
	if got := env.ServerRequests(t, "PATCH", "widgets"); got < 2*n {
		t.Errorf("the API server saw %d PATCH requests to widgets, want at least %d (every widget, at first sight and after the flip)", got, 2*n)
	}
	var svms migrationv1alpha1.StorageVersionMigrationList
	if err := env.Client.List(framework.Context(t, time.Minute), &svms); err != nil {
		t.Fatal(err)
	}
	delegated := 0
	for _, m := range svms.Items {
		if m.Spec.Resource.Resource != "widgets" || m.Status.StorageVersionHash != hashV2 {
			continue
		}
		delegated++
		if m.Status.InTreeMigration != m.Name || len(m.Status.Conditions) == 0 || m.Status.Conditions[0].Type != migrationv1alpha1.MigrationSucceeded {
			t.Errorf("svm migration %s: inTreeMigration %q, conditions %+v; want its own name and Succeeded first", m.Name, m.Status.InTreeMigration, m.Status.Conditions)
		}
		var it storagemigrationv1.StorageVersionMigration
		if err := env.Client.Get(framework.Context(t, time.Minute), client.ObjectKey{Name: m.Name}, &it); err != nil {
			t.Fatalf("the in-tree migration of %s: %v", m.Name, err)
		}
		if !intree.Succeeded(&it) || it.Labels[intree.CreatedByLabel] != intree.CreatedByExecutor || it.Annotations[intree.ForMigrationAnnotation] != string(m.UID) {
			t.Errorf("in-tree migration %s: labels %v, annotations %v, conditions %+v", it.Name, it.Labels, it.Annotations, it.Status.Conditions)
		}
		// svm wrote the widgets only to move their managedFields, one
		// patch each, before it created the in-tree migration (whose time
		// has a resolution of a second).
		updates := widgetWrites(proxy)[firstSightWrites:]
		if len(updates) != n {
			t.Errorf("svm sent %d writes to widgets, want %d: one per widget, for its managedFields", len(updates), n)
		}
		for _, at := range updates {
			if at.After(it.CreationTimestamp.Add(time.Second)) {
				t.Errorf("svm updated a widget at %s, after it created the in-tree migration (%s)", at, it.CreationTimestamp)
				break
			}
		}
	}
	if delegated != 1 {
		t.Errorf("%d svm migrations of widgets to v2, want 1", delegated)
	}
	// kube-controller-manager cannot migrate events (its garbage collector
	// ignores them: an in-tree migration of them never ends), so svm's
	// engine did, and events are migrated like the rest.
	env.WaitStorageState(t, schema.GroupResource{Resource: "events"}, time.Minute, "migrated by svm's engine", func(s *migrationv1alpha1.StorageState) bool {
		return len(s.Status.PersistedStorageVersionHashes) == 1 && s.Status.PersistedStorageVersionHashes[0] == s.Status.CurrentStorageVersionHash
	})
	for _, m := range svms.Items {
		if m.Spec.Resource.Resource == "events" && m.Status.InTreeMigration != "" {
			t.Errorf("svm migration %s of events was handed to kube-controller-manager (%s), which cannot migrate events", m.Name, m.Status.InTreeMigration)
		}
	}
	// The probe cleans up after itself.
	for _, it := range inTreeMigrations(t, env) {
		if it.Labels[intree.CreatedByLabel] == intree.CreatedByProbe {
			t.Errorf("probe migration %s left behind", it.Name)
		}
	}
}

// TestSVMExecutesBesideKubeControllerManager: with --executor=svm on a
// cluster whose kube-controller-manager runs the in-tree migrator, svm
// creates no in-tree migration, never rewrites widgets while a user's
// in-tree migration of them is Running (whether it started before svm's
// migration or during it), marks the CRD StorageMigrating while it
// rewrites, and completes once the in-tree migration has ended.
func TestSVMExecutesBesideKubeControllerManager(t *testing.T) {
	t.Parallel()
	const n = 1500
	env, before := setup(t, n)
	env.SetStorage(t, framework.WidgetResource, "v2")
	proxy := env.StartProxy(t)
	// --qps keeps svm's own run long enough for the in-tree migration to
	// start in the middle of it.
	svm := proxy.StartSVM(t, framework.ControllerArgs("--executor=svm", "--trigger=false", "--qps", "100")...)
	waitLog(t, svm, `executor="svm"`, time.Minute)

	// A user's in-tree migration is Running before svm's is created.
	const user = "user-first"
	env.CreateInTreeMigration(t, user, widgetsGR)
	since := runningSince(t, waitInTree(t, env, user, "Running", intree.IsRunning))
	env.CreateMigration(t, "widgets-1", framework.Widgets)
	ended := waitInTree(t, env, user, "ended", intree.Ended)
	expectNoWriteWhileRunning(t, proxy, ended, since, time.Time{})
	waitSucceeded(t, env, "widgets-1")

	// svm's is running when a user's in-tree migration starts: svm stops,
	// waits, and resumes after it.
	env.CreateMigration(t, "widgets-2", framework.Widgets)
	framework.Eventually(t, "svm rewriting widgets", time.Minute, func(context.Context) (bool, error) {
		return len(widgetWrites(proxy)) > n+100, nil // past the first migration's, in the second's
	})
	const second = "user-during"
	env.CreateInTreeMigration(t, second, widgetsGR)
	since = runningSince(t, waitInTree(t, env, second, "Running", intree.IsRunning))
	ended = waitInTree(t, env, second, "ended", intree.Ended)
	// svm learns of it through its watch, as fast as the API server
	// tells: writes it sent before it stopped are not the point, any
	// write after it did is.
	expectNoWriteWhileRunning(t, proxy, ended, since, stoppedFor(t, env, "widgets-2", since))
	waitSucceeded(t, env, "widgets-2")
	reasons := framework.EventReasons(env.Events(t, "StorageVersionMigration", "widgets-2"))
	if reasons["WaitingForInTreeMigration"] == 0 {
		t.Errorf("events of widgets-2 %v: want WaitingForInTreeMigration", reasons)
	}

	env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v2": n})
	env.ExpectUnchanged(t, framework.Widgets, before)
	for _, it := range inTreeMigrations(t, env) {
		if it.Name != "user-first" && it.Name != "user-during" {
			t.Errorf("in-tree migration %s exists: with --executor=svm svm must create none", it.Name)
		}
	}
	// svm marked the CRD while it rewrote, and cleared the mark.
	c := crd(t, env)
	var migrating *apiextensionsv1.CustomResourceDefinitionCondition
	for i := range c.Status.Conditions {
		if c.Status.Conditions[i].Type == apiextensionsv1.StorageMigrating {
			migrating = &c.Status.Conditions[i]
		}
	}
	if migrating == nil || migrating.Status != apiextensionsv1.ConditionFalse || !strings.Contains(migrating.Message, "svm migration widgets-2 succeeded") {
		t.Errorf("StorageMigrating condition %+v: want False, set by svm after widgets-2", migrating)
	}
	if !slices.ContainsFunc(c.ManagedFields, func(f metav1.ManagedFieldsEntry) bool {
		return f.Manager == "svm-migration-controller" && f.Subresource == "status"
	}) {
		t.Error("svm never wrote the CRD's status (StorageMigrating)")
	}
}

// TestAutoChoosesSVMWhenKubeControllerManagerDoesNotMigrate: the in-tree
// API is served and a kube-controller-manager holds its lease, but its
// storage version migrator is turned off. svm's probe finds that out, svm
// executes itself, and the migration succeeds.
func TestAutoChoosesSVMWhenKubeControllerManagerDoesNotMigrate(t *testing.T) {
	t.Parallel()
	const n = 100
	env := framework.Start(t, controlplane.Options{ControllerManager: true, WithoutMigrator: true})
	env.InstallCRDs(t, framework.CRDBasesDir())
	env.CreateWidgetCRD(t, "v1")
	env.CreateWidgets(t, "v1", []string{"default"}, n)
	env.SetStorage(t, framework.WidgetResource, "v2")
	svm := env.StartSVM(t, framework.ControllerArgs("--trigger=false")...)
	waitLog(t, svm, `executor="svm"`, time.Minute)
	if log := string(svm.Log(t)); !strings.Contains(log, "did not start the probe migration") {
		t.Errorf("svm chose its engine for another reason than the probe:\n%s", log)
	}
	env.CreateMigration(t, "widgets", framework.Widgets)
	m := waitSucceeded(t, env, "widgets")
	if m.Status.InTreeMigration != "" || m.Status.Progress.Migrated() != n {
		t.Errorf("inTreeMigration %q, progress %+v: want svm's engine to rewrite all %d", m.Status.InTreeMigration, m.Status.Progress, n)
	}
	env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v2": n})
	if its := inTreeMigrations(t, env); len(its) != 0 {
		t.Errorf("%d in-tree migrations left, want none (the probe deletes its own)", len(its))
	}
}

// waitInTree waits until the in-tree migration name satisfies cond and
// returns it.
func waitInTree(t *testing.T, env *framework.Env, name, what string, cond func(*storagemigrationv1.StorageVersionMigration) bool) *storagemigrationv1.StorageVersionMigration {
	t.Helper()
	var m *storagemigrationv1.StorageVersionMigration
	// kube-controller-manager's migrator waits for its garbage collector's
	// cache before its first write (82 s in every benchmark pass), and
	// then writes one object at a time: on a loaded machine, 1,500 widgets
	// took it more than 3 minutes.
	framework.Eventually(t, "in-tree migration "+name+" "+what, 6*time.Minute, func(ctx context.Context) (bool, error) {
		var err error
		m, err = env.Kube.StoragemigrationV1().StorageVersionMigrations().Get(ctx, name, metav1.GetOptions{})
		return err == nil && cond(m), err
	})
	return m
}

// runningSince is when kube-controller-manager marked the in-tree
// migration m Running, read while it still is: the condition's time moves
// again when it stops. It may come seconds after m was created on a busy
// machine, and svm holds back only for a Running one.
func runningSince(t *testing.T, m *storagemigrationv1.StorageVersionMigration) time.Time {
	t.Helper()
	running := meta.FindStatusCondition(m.Status.Conditions, string(storagemigrationv1.MigrationRunning))
	if running == nil || running.Status != metav1.ConditionTrue {
		t.Fatalf("in-tree migration %s is not Running: conditions %+v", m.Name, m.Status.Conditions)
	}
	return running.LastTransitionTime.Time
}

// expectNoWriteWhileRunning fails if svm wrote a widget between
// the moment the in-tree migration m was marked Running (since) and the
// moment it stopped being Running. Condition times have a resolution of
// one second: the window checked is the one second shorter at each end.
//
// stopped, when not zero, is when svm stopped a run of its own for m (see
// stoppedFor): the window then begins there, if later. A run that was
// under way when m started may write until svm has seen m Running; it must
// stop while m runs, and write nothing after.
func expectNoWriteWhileRunning(t *testing.T, p *framework.Proxy, m *storagemigrationv1.StorageVersionMigration, since, stopped time.Time) {
	t.Helper()
	succeeded := meta.FindStatusCondition(m.Status.Conditions, string(storagemigrationv1.MigrationSucceeded))
	running := meta.FindStatusCondition(m.Status.Conditions, string(storagemigrationv1.MigrationRunning))
	if succeeded == nil || running == nil {
		t.Fatalf("in-tree migration %s: conditions %+v", m.Name, m.Status.Conditions)
	}
	// Running's transition time is now when it ended (its last
	// transition), or, where kube-controller-manager clears it without a
	// new time (1.35's v1beta1 runner), Succeeded's is.
	end := running.LastTransitionTime.Time
	if succeeded.LastTransitionTime.After(end) {
		end = succeeded.LastTransitionTime.Time
	}
	from, to := since.Add(time.Second), end.Add(-time.Second)
	if !stopped.IsZero() {
		t.Logf("svm stopped %s after in-tree migration %s was marked Running (the time of a second)", stopped.Sub(since).Round(time.Millisecond), m.Name)
		if !stopped.Before(to) {
			t.Fatalf("svm stopped at %s, not while in-tree migration %s was Running (%s to %s)", stopped.Format(time.RFC3339Nano), m.Name, since, end)
		}
		if stopped.After(from) {
			from = stopped
		}
	}
	if !to.After(from) {
		t.Fatalf("in-tree migration %s ran for under two seconds (%s to %s): the test proves nothing; use more objects", m.Name, since, end)
	}
	for _, at := range widgetWrites(p) {
		if at.After(from) && at.Before(to) {
			t.Fatalf("svm wrote a widget at %s while in-tree migration %s was Running (%s to %s)", at.Format(time.RFC3339Nano), m.Name, from, to)
		}
	}
}

// stoppedFor is when svm stopped migration name for an in-tree migration
// marked Running at since (to the second): its first such event since.
func stoppedFor(t *testing.T, env *framework.Env, name string, since time.Time) time.Time {
	t.Helper()
	var first time.Time
	for _, ev := range env.Events(t, "StorageVersionMigration", name) {
		at := ev.EventTime.Time
		if ev.Reason != "WaitingForInTreeMigration" || !strings.Contains(ev.Note, "stopped at its last completed chunk") || at.Before(since) {
			continue
		}
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	if first.IsZero() {
		t.Fatalf("svm recorded no event that it stopped %s for an in-tree migration", name)
	}
	return first
}

// waitSucceeded waits until svm's migration name has succeeded and checks
// that Succeeded is its first condition, where `kubectl wait` and
// .status.conditions[0] readers look.
func waitSucceeded(t *testing.T, env *framework.Env, name string) *migrationv1alpha1.StorageVersionMigration {
	t.Helper()
	m := env.WaitMigrationSucceeded(t, name, 5*time.Minute)
	if m.Status.Conditions[0].Type != migrationv1alpha1.MigrationSucceeded {
		t.Errorf("conditions %+v: want Succeeded at index 0", m.Status.Conditions)
	}
	return m
}
