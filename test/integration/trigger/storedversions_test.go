package trigger_test

import (
	"context"
	"slices"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svm-project/svm/internal/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestStoredVersionsArePruned: a CRD whose storage moved from v1 to v2 ends
// with status.storedVersions [v2] once svm has migrated it, and v1 can then
// be removed from the CRD, which the API server refuses while v1 is listed.
func TestStoredVersionsArePruned(t *testing.T) {
	t.Parallel()
	const n = 100
	env := framework.StartWithWidgets(t, controlplane.Options{}, []string{"default"}, n)
	env.SetCRDStorageVersion(t, framework.WidgetsCRDName, "v2")
	if got := env.CRDStoredVersions(t, framework.WidgetsCRDName); !slices.Equal(got, []string{"v1", "v2"}) {
		t.Fatalf("storedVersions after the flip %v, want [v1 v2]", got)
	}
	// While v1 is listed as stored, the API server keeps it in the spec.
	if err := removeVersion(t, env, "v1"); err == nil {
		t.Fatal("the API server let v1 go while it was in storedVersions; the test proves nothing")
	}

	env.StartSVM(t, args("10m")...)
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return slices.Equal(env.CRDStoredVersions(t, framework.WidgetsCRDName), []string{"v2"}), nil
	})
	if err != nil {
		t.Fatalf("storedVersions stayed %v", env.CRDStoredVersions(t, framework.WidgetsCRDName))
	}
	env.ExpectStored(t, framework.EtcdPrefix(framework.Widgets.GroupResource()), map[string]int{"example.com/v2": n})
	waitState(t, env, "migrated to v2", persisted(hashV2))
	if err := removeVersion(t, env, "v1"); err != nil {
		t.Fatalf("remove v1 after pruning: %v", err)
	}
}

func removeVersion(t *testing.T, env *framework.Env, version string) error {
	t.Helper()
	ctx := framework.Context(t, time.Minute)
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: framework.WidgetsCRDName}, crd); err != nil {
		t.Fatal(err)
	}
	crd.Spec.Versions = slices.DeleteFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == version })
	return env.Client.Update(ctx, crd)
}
