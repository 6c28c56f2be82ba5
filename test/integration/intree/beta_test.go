package intree_test

import (
	"context"
	"testing"
	"time"

	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	storagemigrationv1beta1 "k8s.io/api/storagemigration/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svm-project/svm/internal/intree"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestSVMKeepsOutOfV1beta1InTreeMigrations: Kubernetes 1.35 and 1.36
// serve the in-tree migration API as v1beta1, off by default; here it is
// turned on, with kube-controller-manager's migrator, as a user would.
// svm controller (auto) does not hand migrations over to v1beta1 and says
// why, and never rewrites widgets while a user's v1beta1 migration of them
// is Running: its own migration waits, then completes.
func TestSVMKeepsOutOfV1beta1InTreeMigrations(t *testing.T) {
	// Parallel at the top too: a test that is not holds back every
	// parallel test of the package until its subtests end.
	t.Parallel()
	for _, minor := range []string{"1.35", "1.36"} {
		t.Run(minor, func(t *testing.T) {
			t.Parallel()
			const n = 1500
			env := framework.Start(t, controlplane.Options{
				Release:                minor,
				APIServerFlags:         []string{"--feature-gates=StorageVersionMigrator=true", "--runtime-config=storagemigration.k8s.io/v1beta1=true"},
				ControllerManager:      true,
				ControllerManagerFlags: []string{"--feature-gates=StorageVersionMigrator=true"},
			})
			env.InstallCRDs(t, framework.CRDBasesDir())
			env.CreateWidgetCRD(t, "v1")
			env.CreateWidgets(t, "v1", []string{"ns-a", "ns-b"}, n)
			before := env.TakeSnapshot(t, framework.Widgets)
			env.SetStorage(t, framework.WidgetResource, "v2")
			proxy := env.StartProxy(t)
			svm := proxy.StartSVM(t, framework.ControllerArgs("--trigger=false")...)
			waitLog(t, svm, `executor="svm" why="the server serves the in-tree API as storagemigration.k8s.io/v1beta1 only`, time.Minute)

			// A user's v1beta1 migration is Running before svm's is created.
			const user = "user-beta"
			ctx := framework.Context(t, 5*time.Minute)
			_, err := env.Kube.StoragemigrationV1beta1().StorageVersionMigrations().Create(ctx, &storagemigrationv1beta1.StorageVersionMigration{
				ObjectMeta: metav1.ObjectMeta{Name: user},
				Spec:       storagemigrationv1beta1.StorageVersionMigrationSpec{Resource: metav1.GroupResource{Group: widgetsGR.Group, Resource: widgetsGR.Resource}},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create the v1beta1 in-tree migration: %v", err)
			}
			since := runningSince(t, waitBeta(t, env, user, "Running", intree.IsRunning))
			env.CreateMigration(t, "widgets-1", framework.Widgets)
			ended := waitBeta(t, env, user, "ended", intree.Ended)
			expectNoWriteWhileRunning(t, proxy, ended, since, time.Time{})
			waitSucceeded(t, env, "widgets-1")
			if reasons := framework.EventReasons(env.Events(t, "StorageVersionMigration", "widgets-1")); reasons["WaitingForInTreeMigration"] == 0 {
				t.Errorf("events of widgets-1 %v: want WaitingForInTreeMigration (svm saw the v1beta1 migration)", reasons)
			}
			env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v2": n})
			env.ExpectUnchanged(t, framework.Widgets, before)
		})
	}
}

// waitBeta waits until the v1beta1 in-tree migration name satisfies cond,
// and returns it as a v1 one (the two versions' fields are the same).
func waitBeta(t *testing.T, env *framework.Env, name, what string, cond func(*storagemigrationv1.StorageVersionMigration) bool) *storagemigrationv1.StorageVersionMigration {
	t.Helper()
	var m storagemigrationv1.StorageVersionMigration
	start := time.Now()
	// kube-controller-manager's migrator waits for its garbage
	// collector's cache before it starts, and migrates the widgets one
	// page at a time: minutes on a loaded 2-core machine.
	framework.Eventually(t, "v1beta1 in-tree migration "+name+" "+what, 6*time.Minute, func(ctx context.Context) (bool, error) {
		got, err := env.Kube.StoragemigrationV1beta1().StorageVersionMigrations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		m = intree.FromBeta(got)
		return cond(&m), nil
	})
	t.Logf("v1beta1 in-tree migration %s %s after %s", name, what, time.Since(start).Round(time.Second))
	return &m
}
