package trigger_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/internal/trigger"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestAggregatedResources shows that svm migrates the resources of an
// aggregated API server on first install: through the trigger when the
// server reports storage version hashes, and once through the initializer
// when it does not. The flunders are first left in etcd in an older
// version; afterwards every one is rewritten (its etcd revision moves), is
// stored in the server's storage version, and keeps its content.
func TestAggregatedResources(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{})
	env.InstallCRDs(t, framework.CRDBasesDir())
	env.StartSampleAPIServer(t)
	const n = 100
	env.CreateFlunders(t, "wardle", n)
	prefix := framework.SampleAPIEtcdPrefix("flunders")
	stored := map[string]int{framework.Flunders.GroupVersion().String(): n}
	old := map[string]int{framework.Flunders.Group + "/v1beta1": n}
	snapshot := env.TakeSnapshot(t, framework.Flunders)
	env.StoreFlundersAsV1beta1(t)
	env.ExpectStored(t, prefix, old)
	env.ExpectUnchanged(t, framework.Flunders, snapshot)
	flunders := migrationv1alpha1.GroupResource{Group: framework.Flunders.Group, Resource: framework.Flunders.Resource}
	stateName := migrationv1alpha1.StorageStateName(flunders)

	// The sample server reports hashes: the trigger keeps a StorageState
	// for flunders and migrates them like any other resource.
	revisions := etcdRevisions(t, env, prefix)
	svm := env.StartSVM(t, args("1m")...)
	hash := resources.StorageVersionHash(framework.Flunders.Group, framework.Flunders.Version, "Flunder")
	env.WaitStorageState(t, framework.Flunders.GroupResource(), 2*time.Minute, "flunders migrated by the trigger", persisted(hash))
	expectRewritten(t, env, prefix, revisions)
	env.ExpectStored(t, prefix, stored)
	env.ExpectUnchanged(t, framework.Flunders, snapshot)
	svm.Kill()
	// The sample server marks v1alpha1 deprecated: every patch draws a
	// warning, which svm reports once, not once per object.
	if got := strings.Count(string(svm.Log(t)), "Flunder is deprecated"); got != 1 {
		t.Errorf("svm logged the deprecation warning %d times, want once", got)
	}

	// Forget what the trigger did, and serve discovery without hashes, as
	// aggregated servers that do not report them do. The initializer
	// migrates flunders once, and no StorageState claims anything.
	forget(t, env, framework.Flunders.Group)
	env.StoreFlundersAsV1beta1(t)
	env.ExpectStored(t, prefix, old)
	proxy := env.StartProxy(t)
	proxy.StripStorageVersionHashes(framework.Flunders.Group)
	revisions = etcdRevisions(t, env, prefix)
	start := time.Now()
	svm = proxy.StartSVM(t, args("1m")...)
	initial := env.WaitMigrationSucceeded(t, trigger.InitialMigrationName(flunders), 2*time.Minute)
	if initial.Labels[trigger.CreatedByLabel] != trigger.InitializerValue {
		t.Errorf("one-time migration labels %v, want %s=%s", initial.Labels, trigger.CreatedByLabel, trigger.InitializerValue)
	}
	if initial.Status.Progress.Migrated() != n {
		t.Errorf("one-time migration progress %+v, want %d rewritten", initial.Status.Progress, n)
	}
	expectRewritten(t, env, prefix, revisions)
	env.ExpectStored(t, prefix, stored)
	env.ExpectUnchanged(t, framework.Flunders, snapshot)

	// Later rounds, and a restarted controller, find the migration and make
	// no other. A built-in resource's heartbeat shows that rounds ran.
	svm.Kill()
	svm = proxy.StartSVM(t, args("1m")...)
	env.WaitStorageState(t, schema.GroupResource{Resource: "configmaps"}, 2*time.Minute, "a discovery round after the restart", func(s *migrationv1alpha1.StorageState) bool {
		return s.Status.LastHeartbeatTime.After(start.Add(2 * time.Second))
	})
	var list migrationv1alpha1.StorageVersionMigrationList
	if err := env.Client.List(framework.Context(t, time.Minute), &list); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range list.Items {
		if m.Spec.Resource.Group == framework.Flunders.Group && m.Spec.Resource.Resource == "flunders" {
			names = append(names, m.Name)
		}
	}
	if diff := cmp.Diff([]string{initial.Name}, names); diff != "" {
		t.Errorf("flunder migrations after the restart (-want +got):\n%s", diff)
	}
	err := env.Client.Get(framework.Context(t, time.Minute), client.ObjectKey{Name: stateName}, &migrationv1alpha1.StorageState{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("get StorageState %s for a resource without a hash: %v, want NotFound", stateName, err)
	}
}

// etcdRevisions reads the modification revision of every key under prefix.
func etcdRevisions(t *testing.T, env *framework.Env, prefix string) map[string]int64 {
	t.Helper()
	resp, err := env.Etcd.Get(framework.Context(t, time.Minute), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = kv.ModRevision
	}
	return out
}

// expectRewritten checks that every key in before was written again.
func expectRewritten(t *testing.T, env *framework.Env, prefix string, before map[string]int64) {
	t.Helper()
	after := etcdRevisions(t, env, prefix)
	if len(after) != len(before) {
		t.Errorf("%d keys under %s, had %d", len(after), prefix, len(before))
	}
	stale := 0
	for key, rev := range before {
		if after[key] <= rev {
			stale++
		}
	}
	if stale > 0 {
		t.Errorf("%d of %d values under %s were not rewritten", stale, len(before), prefix)
	}
}

// forget deletes the StorageStates and migrations of group's resources.
func forget(t *testing.T, env *framework.Env, group string) {
	t.Helper()
	ctx := framework.Context(t, time.Minute)
	var states migrationv1alpha1.StorageStateList
	var migrations migrationv1alpha1.StorageVersionMigrationList
	if err := env.Client.List(ctx, &states); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.List(ctx, &migrations); err != nil {
		t.Fatal(err)
	}
	var objs []client.Object
	for i := range states.Items {
		if states.Items[i].Spec.Resource.Group == group {
			objs = append(objs, &states.Items[i])
		}
	}
	for i := range migrations.Items {
		if migrations.Items[i].Spec.Resource.Group == group {
			objs = append(objs, &migrations.Items[i])
		}
	}
	for _, o := range objs {
		if err := env.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
}
