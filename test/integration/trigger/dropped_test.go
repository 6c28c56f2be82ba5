package trigger_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestAFieldTheNewVersionDroppedOwnsNothing: a CRD whose v2 dropped
// spec.legacy, and objects applied through v1 by one manager, whose only
// managedFields entry owns spec.color and spec.legacy. After the storage
// moves to v2, svm controller rewrites every object in v2 and moves the
// entry to v2 without spec.legacy, which neither v2 nor the objects have
// (the API server pruned it): the entry owns nothing there. Only then are
// storedVersions pruned. v1 is removed from the CRD, and the manager's
// server-side apply through v2 works as before: it still owns spec.color,
// which another manager cannot take without forcing.
func TestAFieldTheNewVersionDroppedOwnsNothing(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{})
	env.InstallCRDs(t, framework.CRDBasesDir())
	r := framework.Resource{Group: framework.TestName(t) + ".example.com", Plural: "gizmos", Kind: "Gizmo"}
	env.CreateDroppingResource(t, r)
	names := env.DroppingObjects(t, r, "qa-manager", "qa", 20)

	env.StartSVM(t, args("10m")...)
	env.SetStorage(t, r, "v2")
	framework.Eventually(t, "storedVersions pruned to [v2]", 3*time.Minute, func(context.Context) (bool, error) {
		return slices.Equal(env.CRDStoredVersions(t, r.CRDName()), []string{"v2"}), nil
	})
	env.ExpectAppliesAfterV1Removed(t, r, "qa-manager", "qa", names)
}
