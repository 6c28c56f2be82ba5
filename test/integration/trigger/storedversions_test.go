package trigger_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestStoredVersionsArePruned: a CRD whose storage moved from v1 to v2 ends
// with status.storedVersions [v2] once svm has migrated it, and v1 can then
// be removed from the CRD, which the API server refuses while v1 is listed.
// The migration also moved the managedFields entries naming v1, which
// server-side apply needs to convert to: it still works once v1 is gone.
func TestStoredVersionsArePruned(t *testing.T) {
	t.Parallel()
	const n = 100
	env := framework.StartWithWidgets(t, controlplane.Options{}, []string{"default"}, n)
	applyEach(t, env, "v1", "alice", `{"spec":{"appliedBy":"alice"}}`)
	prefix := framework.EtcdPrefix(framework.Widgets.GroupResource())
	if got := env.ManagedFieldsVersions(t, prefix); got["example.com/v1"] != 2*n {
		t.Fatalf("managedFields before %v, want %d entries naming v1", got, 2*n)
	}
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
	if diff := cmp.Diff(map[string]int{"example.com/v2": 2 * n}, env.ManagedFieldsVersions(t, prefix)); diff != "" {
		t.Errorf("managedFields in etcd after the migration (-want +got):\n%s", diff)
	}
	if err := removeVersion(t, env, "v1"); err != nil {
		t.Fatalf("remove v1 after pruning: %v", err)
	}
	framework.Eventually(t, "v1 no longer served", time.Minute, func(context.Context) (bool, error) {
		_, err := env.Discovery.ServerResourcesForGroupVersion("example.com/v1")
		return err != nil, nil
	})
	applyEach(t, env, "v2", "dave", `{"spec":{"shape":"round"}}`)
}

// applyEach applies spec (JSON) to every widget through version as
// manager, with server-side apply.
func applyEach(t *testing.T, env *framework.Env, version, manager, spec string) {
	t.Helper()
	ctx := framework.Context(t, 2*time.Minute)
	gvr := framework.Widgets
	gvr.Version = version
	for _, w := range env.List(t, gvr) {
		patch := fmt.Sprintf(`{"apiVersion":"example.com/%s","kind":"Widget","metadata":{"name":%q,"namespace":%q},%s`,
			version, w.GetName(), w.GetNamespace(), strings.TrimPrefix(spec, "{"))
		if _, err := env.Dynamic.Resource(gvr).Namespace(w.GetNamespace()).Patch(ctx, w.GetName(), types.ApplyPatchType, []byte(patch),
			metav1.PatchOptions{FieldManager: manager}); err != nil {
			t.Fatalf("server-side apply of %s through %s as %s: %v", w.GetName(), version, manager, err)
		}
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
