package controlplane_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// The control plane can run Kubernetes' own storage version migrator, and
// it really migrates: after a storage flip, a StorageVersionMigration for
// the widgets rewrites every stored object in the new version and drops the
// old version from the CRD's storedVersions, as svm does.
func TestInTreeMigratorMigratesCustomResources(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{ControllerManager: true})
	if !env.CP.ControllerManagerRunning() || env.CP.ControllerManagerPID() == 0 {
		t.Fatal("kube-controller-manager not running after Start with ControllerManager")
	}

	env.CreateWidgetCRD(t, "v1")
	const n = 50
	env.CreateWidgets(t, "v1", []string{"alpha", "beta"}, n)
	prefix := framework.EtcdPrefix(framework.Widgets.GroupResource())
	env.SetStorage(t, framework.WidgetResource, "v2")
	env.ExpectStored(t, prefix, map[string]int{"example.com/v1": n})
	// The bound is generous: the migrator works from the garbage
	// collector's monitor for the resource, and the collector picks up a
	// new CRD on its discovery resync, every 30 seconds.
	ctx := framework.Context(t, 4*time.Minute)
	if got := env.CRDStoredVersions(t, framework.WidgetsCRDName); !slices.Equal(got, []string{"v1", "v2"}) {
		t.Fatalf("storedVersions after the flip = %v, want [v1 v2]", got)
	}

	migrations := env.Kube.StoragemigrationV1().StorageVersionMigrations()
	start := time.Now()
	_, err := migrations.Create(ctx, &storagemigrationv1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets"},
		Spec: storagemigrationv1.StorageVersionMigrationSpec{
			Resource: metav1.GroupResource{Group: framework.Widgets.Group, Resource: framework.Widgets.Resource},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create StorageVersionMigration: %v", err)
	}
	var last *storagemigrationv1.StorageVersionMigration
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		m, err := migrations.Get(ctx, "widgets", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = m
		if c := apimeta.FindStatusCondition(m.Status.Conditions, string(storagemigrationv1.MigrationFailed)); c != nil && c.Status == metav1.ConditionTrue {
			return false, fmt.Errorf("migration failed: %s: %s", c.Reason, c.Message)
		}
		return apimeta.IsStatusConditionTrue(m.Status.Conditions, string(storagemigrationv1.MigrationSucceeded)), nil
	})
	if err != nil {
		var status any
		if last != nil {
			status = last.Status
		}
		t.Fatalf("StorageVersionMigration did not succeed: %v; last status %+v", err, status)
	}
	t.Logf("in-tree migration of %d widgets succeeded %s after it was created", n, time.Since(start).Round(time.Second))
	if last.Status.ResourceVersion == "" {
		t.Error("succeeded migration has no status.resourceVersion")
	}

	env.ExpectStored(t, prefix, map[string]int{"example.com/v2": n})

	// storedVersions is trimmed by a separate controller that watches for
	// the Succeeded condition, so it may lag it a little.
	var got []string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		got = env.CRDStoredVersions(t, framework.WidgetsCRDName)
		return slices.Equal(got, []string{"v2"}), nil
	})
	if err != nil {
		t.Errorf("storedVersions after the migration = %v, want [v2]", got)
	}

	// Like the API server, it can be killed and started again.
	if err := env.CP.KillControllerManager(); err != nil {
		t.Fatalf("kill kube-controller-manager: %v", err)
	}
	if env.CP.ControllerManagerRunning() || env.CP.ControllerManagerPID() != 0 {
		t.Fatal("kube-controller-manager still running after SIGKILL")
	}
	if err := env.CP.StartControllerManager(ctx); err != nil {
		t.Fatalf("restart kube-controller-manager: %v", err)
	}
	if !env.CP.ControllerManagerRunning() {
		t.Error("kube-controller-manager not running after restart")
	}
}
