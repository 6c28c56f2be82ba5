package retire_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestRetireDropsAFieldNoVersionHas: svm retire on a CRD whose v2 dropped
// spec.legacy, over objects whose one managedFields entry (applied through
// v1) owns spec.color and spec.legacy. The entry moves to v2 without
// spec.legacy, which neither v2 nor the objects have, storedVersions are
// pruned, and once v1 is removed the manager's server-side apply works as
// before.
func TestRetireDropsAFieldNoVersionHas(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	r := framework.Resource{Group: framework.TestName(t) + ".example.com", Plural: "gizmos", Kind: "Gizmo"}
	env.CreateDroppingResource(t, r)
	ns := framework.TestName(t)
	names := env.DroppingObjects(t, r, "qa-manager", ns, 20)
	env.SetStorage(t, r, "v2")

	code, out, errOut := framework.RunSVM(t, env.KubeconfigFile(t), 3*time.Minute, "retire", "gizmos.v1."+r.Group, "--crd-drain-margin", framework.TestDrainMargin.String())
	if code != 0 {
		t.Fatalf("svm retire: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"managedFields moved off the retired versions on 20 objects", "storedVersions: pruned to [v2]"} {
		if !strings.Contains(out, want) {
			t.Errorf("svm retire does not say %q:\n%s", want, out)
		}
	}
	if got := env.CRDStoredVersions(t, r.CRDName()); !slices.Equal(got, []string{"v2"}) {
		t.Fatalf("storedVersions %v, want [v2]", got)
	}
	env.ExpectAppliesAfterV1Removed(t, r, "qa-manager", ns, names)
}
