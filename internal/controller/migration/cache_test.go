package migration

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/followup"
	"github.com/svm-project/svm/internal/intree"
	"github.com/svm-project/svm/internal/operation"
	"github.com/svm-project/svm/internal/scheme"
)

// sharingClient lists migrations as the manager's cache does when asked
// not to copy: each item is a copy of the cached struct that shares its
// maps, slices and pointers with it. Everything else, and every write,
// goes to the embedded client.
type sharingClient struct {
	client.Client
	migrations []*migrationv1alpha1.StorageVersionMigration
	inTree     []*storagemigrationv1.StorageVersionMigration
	mu         sync.Mutex
	copying    []string // the lists asked for with a deep copy
}

func (c *sharingClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := (&client.ListOptions{}).ApplyOptions(opts)
	copying := o.UnsafeDisableDeepCopy == nil || !*o.UnsafeDisableDeepCopy
	switch l := list.(type) {
	case *migrationv1alpha1.StorageVersionMigrationList:
		c.noteCopying(copying, "migrations")
		for _, m := range c.migrations {
			l.Items = append(l.Items, *m)
		}
		return nil
	case *storagemigrationv1.StorageVersionMigrationList:
		c.noteCopying(copying, "in-tree migrations")
		for _, m := range c.inTree {
			l.Items = append(l.Items, *m)
		}
		return nil
	}
	return c.Client.List(ctx, list, opts...)
}

func (c *sharingClient) noteCopying(copying bool, what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if copying {
		c.copying = append(c.copying, what)
	}
}

// editingExecutor edits the migration it is handed, as a run may (it is
// the run's own copy), and succeeds.
type editingExecutor struct {
	mu   sync.Mutex
	runs []string
}

func (e *editingExecutor) Execute(_ context.Context, run Run) (operation.RunResult, error) {
	m := run.Migration
	m.Labels["edited"] = "yes"
	m.Annotations["edited"] = "yes"
	for i := range m.Status.Conditions {
		m.Status.Conditions[i].Message = "edited"
	}
	e.mu.Lock()
	e.runs = append(e.runs, m.Name)
	e.mu.Unlock()
	return operation.RunResult{}, nil
}

// cachedMigrations are a migration to resume, a first-sight rewrite, one
// held by an in-tree migration, a finished one and one being deleted, with
// the in-tree migrations: the holder, and the abandoned one of the
// migration being deleted.
func cachedMigrations() ([]*migrationv1alpha1.StorageVersionMigration, []*storagemigrationv1.StorageVersionMigration) {
	resume := stopped("")
	firstSight := withUID(triggered(mig("gadgets", "gadgets", 2, migrationv1alpha1.MigrationRunning), followup.ReasonFirstSight), "uid-gadgets")
	held := withUID(triggered(mig("pods", "pods", 3), "storage changed"), "uid-pods")
	done := withUID(triggered(mig("secrets", "secrets", 0, migrationv1alpha1.MigrationSucceeded), "storage changed"), "uid-secrets")
	leaving := withUID(triggered(deleted(mig("configmaps", "configmaps", 4)), "storage changed"), "uid-configmaps")
	resume.Labels, resume.Annotations = map[string]string{"a": "b"}, map[string]string{"a": "b"}
	leaving.Finalizers = []string{"example.com/keep"}
	holder := inTree("kcm-pods", "pods", true, "")
	abandoned := inTree("configmaps", "configmaps", true, "uid-configmaps")
	abandoned.Labels = map[string]string{intree.CreatedByLabel: intree.CreatedByExecutor}
	return []*migrationv1alpha1.StorageVersionMigration{resume, &firstSight, &held, &done, &leaving},
		[]*storagemigrationv1.StorageVersionMigration{&holder, &abandoned}
}

// TestReconcileLeavesTheCacheAlone: Reconcile reads the cache's own
// objects, uncopied. Scheduling, starting runs (whose executor edits the
// migration it is handed), noting held migrations, deleting abandoned
// in-tree migrations and settling the runs' endings leave every cached
// object as it was.
func TestReconcileLeavesTheCacheAlone(t *testing.T) {
	migrations, inTrees := cachedMigrations()
	var before []client.Object
	objs := []client.Object{}
	for _, m := range migrations {
		before, objs = append(before, m.DeepCopy()), append(objs, m.DeepCopy())
	}
	for _, it := range inTrees {
		before, objs = append(before, it.DeepCopy()), append(objs, it.DeepCopy())
	}
	fc := fake.NewClientBuilder().WithScheme(scheme.Scheme).
		WithStatusSubresource(&migrationv1alpha1.StorageVersionMigration{}).
		WithObjects(objs...).Build()
	cl := &sharingClient{Client: fc, migrations: migrations, inTree: inTrees}
	ex := &editingExecutor{}
	rec := events.NewFakeRecorder(100)
	r := &Reconciler{Client: cl, Executors: &Choice{}, InTreeServed: true, Recorder: rec, MaxParallel: 3, Clock: clocktesting.NewFakeClock(t0)}
	r.Executors.Set(&Executors{Name: intree.ExecutorSVM, Chosen: ex, Engine: ex})
	r.setDefaults()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = r.runner.Start(ctx) }()

	reconcileUntilIdle(t, r)
	if len(ex.runs) != 2 {
		t.Errorf("runs %v, want the migration resumed and the first-sight rewrite", ex.runs)
	}
	if err := fc.Get(t.Context(), client.ObjectKey{Name: "configmaps"}, &storagemigrationv1.StorageVersionMigration{}); err == nil {
		t.Error("the abandoned in-tree migration was not deleted")
	}
	if notes := drain(rec); !strings.Contains(notes, ReasonWaitingForInTreeMigration) {
		t.Errorf("no event for the held migration in %q", notes)
	}
	if len(cl.copying) > 0 {
		t.Errorf("Reconcile listed %v with a deep copy", cl.copying)
	}
	after := make([]client.Object, 0, len(before))
	for _, m := range migrations {
		after = append(after, m)
	}
	for _, it := range inTrees {
		after = append(after, it)
	}
	for i := range before {
		if !apiequality.Semantic.DeepEqual(before[i], after[i]) {
			t.Errorf("cached %T %s was modified:\nbefore %+v\nafter  %+v", after[i], after[i].GetName(), before[i], after[i])
		}
	}
}

// reconcileUntilIdle reconciles until no run is under way, then once more
// to settle the last endings.
func reconcileUntilIdle(t *testing.T, r *Reconciler) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := r.Reconcile(t.Context(), reconcile.Request{}); err != nil {
			t.Fatal(err)
		}
		r.runner.mu.Lock()
		idle := len(r.runner.cancels) == 0
		r.runner.mu.Unlock()
		if idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("runs still under way after 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := r.Reconcile(t.Context(), reconcile.Request{}); err != nil {
		t.Fatal(err)
	}
}

func drain(rec *events.FakeRecorder) string {
	var notes []string
	for {
		select {
		case e := <-rec.Events:
			notes = append(notes, e)
		default:
			return strings.Join(notes, "\n")
		}
	}
}
