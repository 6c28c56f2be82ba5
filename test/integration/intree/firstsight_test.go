package intree_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/trigger"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestFreshSVMHandsOverAFlipBeforeItsFirstRound: a CRD's storage version
// flips as svm controller is installed on a cluster whose
// kube-controller-manager runs the in-tree migrator, with --executor
// in-tree and otherwise its defaults. The flip is a known change, so it is
// handed over before the first-sight rewrites of every other resource, and
// done within 3 minutes; the first-sight round, empty resources run by
// svm's engine and five hand-overs at a time, ends within 15.
func TestFreshSVMHandsOverAFlipBeforeItsFirstRound(t *testing.T) {
	t.Parallel()
	const n = 100
	env, before := setup(t, n)
	env.SetStorage(t, framework.WidgetResource, "v2")
	started := time.Now()
	framework.StartSVMWithKubeconfig(t, env.KubeconfigFile(t), framework.ControllerArgs("--executor", "in-tree")...)

	framework.Eventually(t, "the flip migrated and storedVersions pruned to [v2]", 3*time.Minute, func(context.Context) (bool, error) {
		return slices.Equal(env.CRDStoredVersions(t, framework.WidgetsCRDName), []string{"v2"}), nil
	})
	flipDone := time.Since(started)
	env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v2": n})
	env.ExpectUnchanged(t, framework.Widgets, before)

	env.WaitMigrationsFinished(t, 15*time.Minute)
	roundDone := time.Since(started)
	ms := env.Migrations(t)
	var handedOver, engine, firstSight int
	for _, m := range ms {
		if framework.Failed(&m) {
			t.Errorf("migration %s failed: %s", m.Name, framework.Condition(&m, migrationv1alpha1.MigrationFailed).Message)
		}
		if m.Status.InTreeMigration != "" {
			handedOver++
		} else {
			engine++
		}
		if m.Annotations[trigger.ReasonAnnotation] == trigger.ReasonFirstSight {
			firstSight++
		}
		if m.Spec.Resource.Resource == "widgets" {
			if got := m.Annotations[trigger.ReasonAnnotation]; got != trigger.ReasonChanged {
				t.Errorf("the migration of widgets says reason %q, want %q", got, trigger.ReasonChanged)
			}
			if m.Status.InTreeMigration == "" {
				t.Errorf("the migration of widgets was not handed over")
			}
		}
	}
	if handedOver == 0 || engine == 0 {
		t.Errorf("%d migrations handed over and %d run by svm's engine; want both (non-empty resources handed over, empty ones not)", handedOver, engine)
	}
	t.Logf("the flip was migrated %s after svm started; the first-sight round of %d resources (%d first sight; %d handed over, %d by svm's engine) ended after %s",
		flipDone.Round(time.Second), len(ms), firstSight, handedOver, engine, roundDone.Round(time.Second))
}

// TestAutoFollowsKubeControllerManager: svm controller with
// --executor=auto starts while no kube-controller-manager runs, as during
// a control plane restart, and chooses its own engine; when
// kube-controller-manager comes up and takes its lease, svm chooses again
// and hands the next migration over.
func TestAutoFollowsKubeControllerManager(t *testing.T) {
	t.Parallel()
	env := framework.StartWithWidgets(t, controlplane.Options{}, []string{"ns-a"}, 20)
	svm := framework.StartSVMWithKubeconfig(t, env.KubeconfigFile(t),
		framework.ControllerArgs("--executor-recheck-interval", "2s", "--trigger-interval", "2s", "--crd-settle-delay", "1s")...)
	waitLog(t, svm, `executor="svm"`, time.Minute)
	env.WaitMigrationsFinished(t, 5*time.Minute)

	if err := env.CP.StartControllerManager(framework.Context(t, 3*time.Minute)); err != nil {
		t.Fatalf("start kube-controller-manager: %v", err)
	}
	waitLog(t, svm, `executor="in-tree" why="kube-controller-manager ran a probe migration`, 2*time.Minute)
	env.SetStorage(t, framework.WidgetResource, "v2")
	env.WaitStorageState(t, widgetsGR, 5*time.Minute, "migrated to v2", func(s *migrationv1alpha1.StorageState) bool {
		return slices.Equal(s.Status.PersistedStorageVersionHashes, []string{hashV2})
	})
	env.ExpectStored(t, widgetsPrefix, map[string]int{"example.com/v2": 20})
	for _, m := range env.Migrations(t) {
		if m.Spec.Resource.Resource == "widgets" && m.Status.StorageVersionHash == hashV2 && m.Status.InTreeMigration == "" {
			t.Errorf("svm migration %s of widgets to v2 was not handed over after kube-controller-manager came up", m.Name)
		}
	}
	if log := string(svm.Log(t)); !strings.Contains(log, "The kube-controller-manager lease changed") {
		t.Errorf("svm's log does not say why it chose again")
	}
}
