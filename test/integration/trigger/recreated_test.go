package trigger_test

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestACRDRecreatedOverOrphansIsMigrated: while svm is down, the widgets'
// CRD, migrated to v2 and pruned, is flipped to v1, written, deleted
// without its objects and created again with v2 as its storage version:
// its storedVersions say [v2], its storage version hash is the one svm
// recorded, and etcd holds objects in v1 that no record of svm's names.
// svm, started again, sees another CRD under the name: any version may be
// stored, and it migrates them; etcd ends all v2.
func TestACRDRecreatedOverOrphansIsMigrated(t *testing.T) {
	t.Parallel()
	const n, late = 20, 7
	env := framework.StartWithWidgets(t, controlplane.Options{}, []string{"default"}, n)
	env.SetStorage(t, framework.WidgetResource, "v2")
	prefix := framework.EtcdPrefix(framework.Widgets.GroupResource())

	svm := env.StartSVM(t, args("10m")...)
	waitState(t, env, "migrated to v2", persisted(hashV2))
	env.ExpectStored(t, prefix, map[string]int{"example.com/v2": n})
	if !svm.Stop(time.Minute) {
		t.Fatal("svm did not stop")
	}

	env.SetStorage(t, framework.WidgetResource, "v1")
	// The API server takes the new storage version up a moment after.
	env.WaitWritesStoredIn(t, framework.WidgetResource, "v1")
	for i := range late {
		obj := framework.WidgetResource.Object("v2", fmt.Sprintf("late-%d", i), n+i)
		obj.SetNamespace("default")
		if _, err := env.Dynamic.Resource(framework.WidgetResource.GVR("v2")).Namespace("default").Create(framework.Context(t, time.Minute), obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	env.ExpectStored(t, prefix, map[string]int{"example.com/v2": n, "example.com/v1": late})
	env.RecreateCRDOverOrphans(t, framework.WidgetsCRDName, "v2", env.RawValues(t, prefix))
	if got := env.CRDStoredVersions(t, framework.WidgetsCRDName); len(got) != 1 || got[0] != "v2" {
		t.Fatalf("storedVersions %v after the CRD was created again, want [v2]", got)
	}

	env.StartSVM(t, args("10m")...)
	waitState(t, env, "Unknown after the CRD was created again, then migrated", func(s *migrationv1alpha1.StorageState) bool {
		return len(s.Status.PersistedStorageVersionHashes) == 1 && s.Status.PersistedStorageVersionHashes[0] == hashV2 &&
			env.StoredVersions(t, prefix)["example.com/v1"] == 0
	})
	env.ExpectStored(t, prefix, map[string]int{"example.com/v2": n + late})
}
