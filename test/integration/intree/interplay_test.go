package intree_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestSupersededInTreeMigrationIsDeletedBySVM: svm's migration is deleted
// (as the trigger supersedes one) while the in-tree migration it handed
// over waits, with kube-controller-manager, and so its garbage collector,
// stopped. svm deletes the in-tree migration itself; once
// kube-controller-manager is back it finds none to run, and neither marks
// the CRD nor prunes its storedVersions.
func TestSupersededInTreeMigrationIsDeletedBySVM(t *testing.T) {
	t.Parallel()
	const n = 50
	env, _ := setup(t, n)
	env.SetStorage(t, framework.WidgetResource, "v2")
	svm := env.StartSVM(t, framework.ControllerArgs("--executor=in-tree", "--trigger=false")...)
	waitLog(t, svm, `executor="in-tree"`, time.Minute)
	if err := env.CP.StopControllerManager(); err != nil {
		t.Fatal(err)
	}

	m := env.CreateMigration(t, "widgets-superseded", framework.Widgets)
	it := waitInTreeCreated(t, env, m.Name)
	if err := env.Client.Delete(framework.Context(t, time.Minute), m); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	framework.Eventually(t, "svm deleting the in-tree migration of its deleted migration", time.Minute, func(ctx context.Context) (bool, error) {
		_, err := env.Kube.StoragemigrationV1().StorageVersionMigrations().Get(ctx, it.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	t.Logf("svm deleted in-tree migration %s %s after its migration, with no garbage collector running", it.Name, time.Since(deleted).Round(time.Millisecond))
	waitLog(t, svm, "Deleted an in-tree migration whose svm migration is gone", 10*time.Second)

	if err := env.CP.StartControllerManager(framework.Context(t, 2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	// A migration it ran would be marked Running within seconds, and
	// the CRD with it, before its garbage collector's cache is synced.
	time.Sleep(20 * time.Second)
	if its := inTreeMigrations(t, env); len(its) != 0 {
		t.Errorf("in-tree migrations %v after kube-controller-manager restarted, want none", its)
	}
	c := crd(t, env)
	if got := c.Status.StoredVersions; !slices.Equal(got, []string{"v1", "v2"}) {
		t.Errorf("storedVersions %v, want [v1 v2]: nothing pruned them", got)
	}
	if cond := storageMigrating(c); cond != nil && strings.Contains(cond.Message, it.Name) && !strings.Contains(cond.Message, "svm migration") {
		t.Errorf("StorageMigrating %+v: kube-controller-manager ran the superseded in-tree migration", cond)
	}
}

// TestGuardVoidNeverSaysSucceeded: the storage version flips while svm's
// engine rewrites the widgets. The storage guard voids the run, and the
// CRD's StorageMigrating condition never says MigrationSucceeded for it:
// it says MigrationStartedOver, with the generation the run started at,
// until the next run, which succeeds.
func TestGuardVoidNeverSaysSucceeded(t *testing.T) {
	t.Parallel()
	const n = 1500
	env := framework.StartWithWidgets(t, controlplane.Options{}, []string{"ns-a"}, n)
	env.SetStorage(t, framework.WidgetResource, "v2")
	// --qps keeps the run long enough to flip the storage in its middle.
	env.StartSVM(t, framework.ControllerArgs("--executor=svm", "--trigger=false", "--qps", "100")...)
	seen := watchStorageMigrating(t, env)
	env.CreateMigration(t, "widgets-void", framework.Widgets)
	start := waitStorageMigrating(t, seen, "the run marking the CRD", func(c conditionSeen) bool { return c.Status == apiextensionsv1.ConditionTrue })
	env.SetStorage(t, framework.WidgetResource, "v1")
	flipped := crd(t, env).Generation

	m := env.WaitMigrationSucceeded(t, "widgets-void", 3*time.Minute)
	env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v1": n})
	// The condition is settled once the outcome is saved.
	waitStorageMigrating(t, seen, "the run after the flip succeeding", func(c conditionSeen) bool { return c.Reason == "MigrationSucceeded" })
	conds := seen.stop()
	t.Logf("StorageMigrating as seen: %v", conds)
	voided := slices.IndexFunc(conds, func(c conditionSeen) bool { return c.Reason == "MigrationStartedOver" })
	if voided < 0 {
		t.Fatalf("StorageMigrating never said the run started over: %v", conds)
	}
	for _, c := range conds[:voided] {
		if c.Reason == "MigrationSucceeded" {
			t.Errorf("StorageMigrating said %s before the guard voided the run: %v", c.Reason, conds)
		}
	}
	checkGeneration(t, conds[voided], start.ObservedGeneration, "the voided run's end")
	last := conds[len(conds)-1]
	if last.Reason != "MigrationSucceeded" || last.Status != apiextensionsv1.ConditionFalse {
		t.Errorf("StorageMigrating ends as %+v, want False, MigrationSucceeded (migration %v)", last, m.Status.Conditions)
	}
	checkGeneration(t, last, flipped, "the run after the flip")
}

// TestObservedGenerationIsTheRunsStart: the CRD's spec changes (a printer
// column) while svm's engine rewrites the widgets. The StorageMigrating
// condition that ends that run speaks for the generation it started at,
// not the one the CRD has when the condition is written.
func TestObservedGenerationIsTheRunsStart(t *testing.T) {
	t.Parallel()
	const n = 1500
	env := framework.StartWithWidgets(t, controlplane.Options{}, []string{"ns-a"}, n)
	env.SetStorage(t, framework.WidgetResource, "v2")
	env.StartSVM(t, framework.ControllerArgs("--executor=svm", "--trigger=false", "--qps", "100")...)
	seen := watchStorageMigrating(t, env)
	env.CreateMigration(t, "widgets-gen", framework.Widgets)
	start := waitStorageMigrating(t, seen, "the run marking the CRD", func(c conditionSeen) bool { return c.Status == apiextensionsv1.ConditionTrue })
	before := crd(t, env).Generation
	addPrinterColumn(t, env)
	after := crd(t, env).Generation
	if after == before {
		t.Fatalf("the printer column left the CRD at generation %d", after)
	}
	end := waitStorageMigrating(t, seen, "the run's end", func(c conditionSeen) bool { return c.Status == apiextensionsv1.ConditionFalse })
	t.Logf("StorageMigrating as seen: %v; the CRD went from generation %d to %d during the run", seen.stop(), before, after)
	checkGeneration(t, start, before, "the run's start")
	checkGeneration(t, end, before, "the run's end, written at generation "+strconv.FormatInt(after, 10))
	env.WaitMigrationSucceeded(t, "widgets-gen", 3*time.Minute)
}

// TestManagedFieldsMoveBeforeTheHandOver: the widgets' managedFields
// entries name v1, which kube-controller-manager prunes from the CRD's
// storedVersions once its migration succeeds. svm moves them before it
// hands the migration over, so that at the prune no entry names v1.
func TestManagedFieldsMoveBeforeTheHandOver(t *testing.T) {
	t.Parallel()
	const n = 200
	env, before := setup(t, n)
	env.SetStorage(t, framework.WidgetResource, "v2")
	if got := env.ManagedFieldsVersions(t, widgetsPrefix)["example.com/v1"]; got != n {
		t.Fatalf("%d managedFields entries name v1, want %d", got, n)
	}
	proxy := env.StartProxy(t)
	svm := proxy.StartSVM(t, framework.ControllerArgs("--executor=in-tree", "--trigger=false")...)
	waitLog(t, svm, `executor="in-tree"`, time.Minute)
	env.CreateMigration(t, "widgets-fields", framework.Widgets)

	// Read at the moment storedVersions lose v1: no entry may name it.
	env.WaitPrunedSafely(t, framework.WidgetResource, "v1", 6*time.Minute)
	if diff := cmp.Diff(map[string]int{"example.com/v2": n}, env.ManagedFieldsVersions(t, widgetsPrefix)); diff != "" {
		t.Errorf("managedFields in etcd when storedVersions were pruned (-want +got):\n%s", diff)
	}
	m := waitSucceeded(t, env, "widgets-fields")
	env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v2": n})
	env.ExpectUnchanged(t, framework.Widgets, before)
	var it storagemigrationv1.StorageVersionMigration
	if err := env.Client.Get(framework.Context(t, time.Minute), client.ObjectKey{Name: m.Name}, &it); err != nil {
		t.Fatal(err)
	}
	// svm's writes moved the entries, one per widget, all before it
	// created the in-tree migration (whose time has a resolution of a
	// second).
	writes := widgetWrites(proxy)
	if len(writes) != n {
		t.Errorf("svm sent %d writes to widgets, want %d: one per widget, for its managedFields", len(writes), n)
	}
	created := it.CreationTimestamp.Add(time.Second)
	for _, at := range writes {
		if at.After(created) {
			t.Errorf("svm wrote a widget at %s, after it created the in-tree migration (%s)", at.Format(time.RFC3339Nano), it.CreationTimestamp)
			break
		}
	}
	if msg := framework.Condition(m, migrationv1alpha1.MigrationSucceeded).Message; !strings.Contains(msg, "managedFields moved off the retired versions on 200 objects before it was handed over") {
		t.Errorf("Succeeded says %q: want the entries moved before the hand-over", msg)
	}
}

// waitInTreeCreated waits until svm has created the in-tree migration name.
func waitInTreeCreated(t *testing.T, env *framework.Env, name string) *storagemigrationv1.StorageVersionMigration {
	t.Helper()
	var it *storagemigrationv1.StorageVersionMigration
	framework.Eventually(t, "svm creating in-tree migration "+name, 2*time.Minute, func(ctx context.Context) (bool, error) {
		var err error
		it, err = env.Kube.StoragemigrationV1().StorageVersionMigrations().Get(ctx, name, metav1.GetOptions{})
		return err == nil, nil
	})
	return it
}

func storageMigrating(c *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinitionCondition {
	for i := range c.Status.Conditions {
		if c.Status.Conditions[i].Type == apiextensionsv1.StorageMigrating {
			return &c.Status.Conditions[i]
		}
	}
	return nil
}

// conditionSeen is the StorageMigrating condition as read once.
type conditionSeen struct {
	Status             apiextensionsv1.ConditionStatus
	Reason, Message    string
	ObservedGeneration int64
	// Generation is the CRD's when read.
	Generation int64
}

// conditionWatch records every state of the widgets CRD's StorageMigrating
// condition, read every 50 milliseconds.
type conditionWatch struct {
	mu     sync.Mutex
	seen   []conditionSeen
	cancel context.CancelFunc
	done   chan struct{}
}

func watchStorageMigrating(t *testing.T, env *framework.Env) *conditionWatch {
	ctx, cancel := context.WithCancel(t.Context())
	w := &conditionWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			c := &apiextensionsv1.CustomResourceDefinition{}
			if err := env.Client.Get(ctx, client.ObjectKey{Name: framework.WidgetsCRDName}, c); err == nil {
				if cond := storageMigrating(c); cond != nil {
					w.add(conditionSeen{Status: cond.Status, Reason: cond.Reason, Message: cond.Message, ObservedGeneration: cond.ObservedGeneration, Generation: c.Generation})
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { w.stop() })
	return w
}

// add records c unless it is the state last recorded.
func (w *conditionWatch) add(c conditionSeen) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.seen) == 0 || w.seen[len(w.seen)-1] != c {
		w.seen = append(w.seen, c)
	}
}

func (w *conditionWatch) states() []conditionSeen {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.seen)
}

// stop stops the watch and returns every state seen.
func (w *conditionWatch) stop() []conditionSeen {
	w.cancel()
	<-w.done
	return w.states()
}

// waitStorageMigrating waits until a state seen satisfies cond, and
// returns the first that does.
func waitStorageMigrating(t *testing.T, w *conditionWatch, what string, cond func(conditionSeen) bool) conditionSeen {
	t.Helper()
	var found conditionSeen
	framework.Eventually(t, "StorageMigrating: "+what, 3*time.Minute, func(context.Context) (bool, error) {
		states := w.states()
		i := slices.IndexFunc(states, cond)
		if i >= 0 {
			found = states[i]
		}
		return i >= 0, nil
	})
	return found
}

// checkGeneration checks that c speaks for generation; a server whose CRD
// conditions have no observedGeneration (before 1.35) cannot say.
func checkGeneration(t *testing.T, c conditionSeen, generation int64, what string) {
	t.Helper()
	if c.ObservedGeneration == 0 {
		t.Logf("StorageMigrating at %s has no observedGeneration (a server before 1.35): not checked", what)
		return
	}
	if c.ObservedGeneration != generation {
		t.Errorf("StorageMigrating at %s: observedGeneration %d, want %d (%+v)", what, c.ObservedGeneration, generation, c)
	}
}

// addPrinterColumn adds a printer column to every version of the widgets
// CRD: a change of its spec, and so its generation, that leaves its
// storage alone.
func addPrinterColumn(t *testing.T, env *framework.Env) {
	t.Helper()
	ctx := framework.Context(t, time.Minute)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: framework.WidgetsCRDName}, c); err != nil {
			return err
		}
		for i := range c.Spec.Versions {
			c.Spec.Versions[i].AdditionalPrinterColumns = append(c.Spec.Versions[i].AdditionalPrinterColumns,
				apiextensionsv1.CustomResourceColumnDefinition{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"})
		}
		return env.Client.Update(ctx, c)
	})
	if err != nil {
		t.Fatalf("add a printer column to %s: %v", framework.WidgetsCRDName, err)
	}
}
