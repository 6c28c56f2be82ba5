package trigger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/internal/status"
	"github.com/svm-project/svm/internal/trigger"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// gadgets is the resource of the tests of storage changes: a CRD served in
// v1 and v2, without a conversion webhook.
var gadgets = framework.Resource{Group: "qa.svm.test", Plural: "gadgets", Kind: "Gadget"}

func gadgetHash(version string) string {
	return resources.StorageVersionHash(gadgets.Group, version, gadgets.Kind)
}

// TestFlipAndFlipBackUnseenNeverPrunesWhatIsStored: svm migrates 600
// gadgets to v2, prunes storedVersions to [v2] and records the revision
// since which every gadget written is in v2. While svm sees nothing (its
// process stopped, as between two of its looks), storage goes back to v1,
// 200 gadgets are created and 100 updated through v2 (stored in v1, their
// managedFields naming only v2), and storage comes back to v2: the storage
// version hash is the one svm recorded, and the 300 are newer than its
// revision. svm must rewrite them all before it prunes v1 again, and etcd
// is read at the very moment it does. Twice: with storedVersions as the
// API server left them ([v2, v1]), and cut back to [v2] before svm looks
// again, as kube-controller-manager's migrator does when it starts one of
// its own: then only the generations svm did not see tell.
func TestFlipAndFlipBackUnseenNeverPrunesWhatIsStored(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cut  bool
	}{
		{name: "storedVersions as left"},
		{name: "storedVersions cut", cut: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			flipAndFlipBackUnseen(t, tc.cut)
		})
	}
}

// flipAndFlipBackUnseen is TestFlipAndFlipBackUnseenNeverPrunesWhatIsStored,
// with storedVersions cut to [v2] after the flip back when cut is set.
func flipAndFlipBackUnseen(t *testing.T, cut bool) {
	const n, created, updated = 600, 200, 100
	env := framework.Start(t, controlplane.Options{})
	env.InstallCRDs(t, framework.CRDBasesDir())
	env.CreateResource(t, gadgets)
	env.CreateObjects(t, gadgets, []string{"qa"}, n)
	metricsAddr := framework.FreeAddress(t)
	svm := env.StartSVM(t, framework.ControllerArgs("--leader-elect=false", "--trigger-interval", "120s", "--crd-settle-delay", "2s",
		"--metrics-bind-address", metricsAddr)...)
	gr := gadgets.GVR("v1").GroupResource()
	env.WaitStorageState(t, gr, 2*time.Minute, "first sight migrated", persisted(gadgetHash("v1")))

	env.SetStorage(t, gadgets, "v2")
	env.WaitPrunedSafely(t, gadgets, "v1", 2*time.Minute)
	env.WaitStorageState(t, gr, time.Minute, "v2 migrated, with a revision", func(s *migrationv1alpha1.StorageState) bool {
		return persisted(gadgetHash("v2"))(s) && s.Status.CurrentStorageVersionRevision != ""
	})

	svm.Pause(t)
	env.SetCRDStorageVersion(t, gadgets.CRDName(), "v1")
	env.WaitWritesStoredIn(t, gadgets, "v1")
	writeThroughV2(t, env, created, updated)
	env.SetCRDStorageVersion(t, gadgets.CRDName(), "v2")
	env.WaitWritesStoredIn(t, gadgets, "v2")
	if got := env.StoredVersions(t, gadgets.EtcdPrefix()); got[gadgets.Group+"/v1"] != created+updated {
		t.Fatalf("etcd holds %v after the flip and the flip back, want %d gadgets in v1: nothing to test", got, created+updated)
	}
	if hash := env.StorageVersionHash(t, gadgets.GVR("v2")); hash != gadgetHash("v2") {
		t.Fatalf("discovery's hash is %s, want v2's %s, the one svm recorded", hash, gadgetHash("v2"))
	}
	if cut {
		setStoredVersions(t, env, gadgets.CRDName(), "v2")
	}
	before := env.TakeSnapshot(t, gadgets.GVR("v2"))
	resumed := time.Now().Truncate(time.Second)
	svm.Resume(t)

	if cut {
		// storedVersions say [v2] all along: only a migration made
		// since tells that svm saw the gap.
		waitMigratedSince(t, env, resumed)
	} else {
		env.WaitPrunedSafely(t, gadgets, "v1", 3*time.Minute)
	}
	env.ExpectStored(t, gadgets.EtcdPrefix(), map[string]int{gadgets.Group + "/v2": n + created})
	env.ExpectUnchanged(t, gadgets.GVR("v2"), before)
	env.WaitStorageState(t, gr, time.Minute, "only v2 persisted", persisted(gadgetHash("v2")))

	last := lastSucceeded(t, env, gadgets.Plural)
	if p := last.Status.Progress; p.Listed != n+created || p.WrittenSinceChange != 0 || p.Restored < created+updated {
		t.Errorf("the migration after the flip back: progress %+v, want all %d listed, none skipped as written since the change, at least %d re-stored",
			p, n+created, created+updated)
	}
	expectCountsAddUp(t, env, svm, metricsAddr, gadgets)
}

// writeThroughV2 creates created gadgets and updates updated of the
// existing ones through v2, while the storage version is v1.
func writeThroughV2(t *testing.T, env *framework.Env, created, updated int) {
	t.Helper()
	ctx := framework.Context(t, 2*time.Minute)
	client := env.Dynamic.Resource(gadgets.GVR("v2")).Namespace("qa")
	for i := range created {
		if _, err := client.Create(ctx, gadgets.Object("v2", fmt.Sprintf("late-%03d", i), 1000+i), metav1.CreateOptions{FieldManager: "writer"}); err != nil {
			t.Fatalf("create through v2: %v", err)
		}
	}
	for i := range updated {
		patch := []byte(`{"metadata":{"labels":{"updated-through":"v2"}}}`)
		if _, err := client.Patch(ctx, fmt.Sprintf("obj-%05d", i), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "writer"}); err != nil {
			t.Fatalf("update through v2: %v", err)
		}
	}
}

// TestWriteInFlightAcrossAFlipIsNeverPruned: a validating webhook holds a
// write of one gadget through v1 for longer than the settle delay, and the
// storage version moves to v2 meanwhile. The API server keeps the old
// storage for the requests in flight, so the write lands in v1 after the
// flip. svm, waiting the drain margin its API server's request timeout
// calls for, lists after it lands, rewrites it, and only then prunes.
func TestWriteInFlightAcrossAFlipIsNeverPruned(t *testing.T) {
	t.Parallel()
	const n = 50
	const requestTimeout, hold = 15 * time.Second, 5 * time.Second
	env := framework.Start(t, controlplane.Options{APIServerFlags: []string{"--request-timeout=" + requestTimeout.String()}})
	env.InstallCRDs(t, framework.CRDBasesDir())
	env.CreateResource(t, gadgets)
	env.CreateObjects(t, gadgets, []string{"qa"}, n)
	// The margin the request timeout calls for: twice it.
	env.StartSVM(t, framework.ControllerArgs("--leader-elect=false", "--trigger-interval", "120s", "--crd-settle-delay", "2s",
		"--crd-drain-margin", (2*requestTimeout).String())...)
	gr := gadgets.GVR("v1").GroupResource()
	env.WaitStorageState(t, gr, 3*time.Minute, "first sight migrated", persisted(gadgetHash("v1")))

	held := "obj-00007"
	write := framework.HoldWrite(t, env, gadgets, "v1", "qa", held, hold)
	env.SetCRDStorageVersion(t, gadgets.CRDName(), "v2")
	flipped := time.Now()
	write.Wait(t)
	t.Logf("the held write landed %s after the flip", time.Since(flipped).Round(time.Millisecond))
	key := gadgets.EtcdPrefix() + "qa/" + held
	if got := env.StoredVersions(t, key); got[gadgets.Group+"/v1"] != 1 {
		t.Fatalf("the write held across the flip is stored as %v, want v1: nothing to test", got)
	}

	env.WaitPrunedSafely(t, gadgets, "v1", 3*time.Minute)
	env.ExpectStored(t, gadgets.EtcdPrefix(), map[string]int{gadgets.Group + "/v2": n})
	env.WaitStorageState(t, gr, time.Minute, "only v2 persisted", persisted(gadgetHash("v2")))
	if waited := lastSucceeded(t, env, gadgets.Plural).CreationTimestamp.Sub(flipped); waited < 2*requestTimeout {
		t.Errorf("the migration after the flip was created %s after it, want at least the drain margin %s", waited, 2*requestTimeout)
	}
}

// TestCRDChangesAreNoticedInSeconds: with discovery every 10 minutes, svm
// still notices a CRD's storage flip, the flip back and a storedVersions
// entry added by hand within seconds, since it watches CRDs.
func TestCRDChangesAreNoticedInSeconds(t *testing.T) {
	t.Parallel()
	const within = 10 * time.Second
	env := framework.Start(t, controlplane.Options{})
	env.InstallCRDs(t, framework.CRDBasesDir())
	env.CreateResource(t, gadgets)
	env.CreateObjects(t, gadgets, []string{"qa"}, 20)
	env.StartSVM(t, framework.ControllerArgs("--leader-elect=false", "--trigger-interval", "10m", "--crd-settle-delay", "1s")...)
	gr := gadgets.GVR("v1").GroupResource()
	env.WaitStorageState(t, gr, 2*time.Minute, "first sight migrated", persisted(gadgetHash("v1")))

	noticed := func(what string, change func(), cond func(*migrationv1alpha1.StorageState) bool) {
		t.Helper()
		change()
		start := time.Now()
		env.WaitStorageState(t, gr, time.Minute, what, cond)
		took := time.Since(start)
		t.Logf("%s: noticed in %s", what, took.Round(time.Millisecond))
		if took > within {
			t.Errorf("%s: noticed in %s, want within %s (discovery comes every 10m)", what, took.Round(time.Millisecond), within)
		}
	}
	noticed("flip to v2", func() { env.SetCRDStorageVersion(t, gadgets.CRDName(), "v2") }, currentIs(gadgetHash("v2")))
	env.WaitPrunedSafely(t, gadgets, "v1", 2*time.Minute)
	noticed("flip back to v1", func() { env.SetCRDStorageVersion(t, gadgets.CRDName(), "v1") }, currentIs(gadgetHash("v1")))
	env.WaitPrunedSafely(t, gadgets, "v2", 2*time.Minute)
	noticed("v2 added to storedVersions", func() { setStoredVersions(t, env, gadgets.CRDName(), "v1", "v2") }, func(s *migrationv1alpha1.StorageState) bool {
		return slices.Contains(s.Status.PersistedStorageVersionHashes, gadgetHash("v2"))
	})
	env.WaitPrunedSafely(t, gadgets, "v2", 2*time.Minute)
}

func currentIs(hash string) func(*migrationv1alpha1.StorageState) bool {
	return func(s *migrationv1alpha1.StorageState) bool { return s.Status.CurrentStorageVersionHash == hash }
}

// setStoredVersions writes a CRD's status.storedVersions, as a tool that
// knows objects may be stored in another version would.
func setStoredVersions(t *testing.T, env *framework.Env, name string, versions ...string) {
	t.Helper()
	ctx := framework.Context(t, time.Minute)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			return err
		}
		crd.Status.StoredVersions = versions
		return env.Client.Status().Update(ctx, crd)
	})
	if err != nil {
		t.Fatalf("set storedVersions of %s: %v", name, err)
	}
}

// waitMigratedSince waits for one of svm's trigger migrations of the
// gadgets created at or after since to succeed.
func waitMigratedSince(t *testing.T, env *framework.Env, since time.Time) {
	t.Helper()
	framework.Eventually(t, "a migration of the gadgets made since svm resumed", 3*time.Minute, func(context.Context) (bool, error) {
		for _, m := range migrationsOf(t, env, gadgets.Plural) {
			if trigger.IsOwned(&m) && m.HasCondition(migrationv1alpha1.MigrationSucceeded) && !m.CreationTimestamp.Time.Before(since) {
				return true, nil
			}
		}
		return false, nil
	})
}

// lastSucceeded is the newest of svm's successful trigger migrations of
// the resource named plural.
func lastSucceeded(t *testing.T, env *framework.Env, plural string) migrationv1alpha1.StorageVersionMigration {
	t.Helper()
	var last *migrationv1alpha1.StorageVersionMigration
	for _, m := range migrationsOf(t, env, plural) {
		if trigger.IsOwned(&m) && m.HasCondition(migrationv1alpha1.MigrationSucceeded) &&
			(last == nil || last.CreationTimestamp.Before(&m.CreationTimestamp)) {
			last = &m
		}
	}
	if last == nil {
		t.Fatalf("no successful trigger migration of %s", plural)
	}
	return *last
}

func migrationsOf(t *testing.T, env *framework.Env, plural string) []migrationv1alpha1.StorageVersionMigration {
	t.Helper()
	var list migrationv1alpha1.StorageVersionMigrationList
	if err := env.Client.List(framework.Context(t, time.Minute), &list); err != nil {
		t.Fatal(err)
	}
	var out []migrationv1alpha1.StorageVersionMigration
	for _, m := range list.Items {
		if m.Spec.Resource.Resource == plural {
			out = append(out, m)
		}
	}
	return out
}

// outcomesLogged matches the log line of a migration that ended, with its
// outcome counts.
var outcomesLogged = regexp.MustCompile(`"Migration (succeeded|failed)".*\blisted=(\d+) restored=(\d+) alreadyCurrent=(\d+) writtenSinceStart=(\d+) writtenSinceChange=(\d+) gone=(\d+) failed=(\d+)`)

// expectCountsAddUp checks that every object each migration of r listed
// lands under exactly one outcome: in each migration's status, in svm's
// log line for it, and in the objects_total metric over all of them.
func expectCountsAddUp(t *testing.T, env *framework.Env, svm *framework.Process, metricsAddr string, r framework.Resource) {
	t.Helper()
	var listed int64
	for _, m := range migrationsOf(t, env, r.Plural) {
		p := m.Status.Progress
		if sum := p.Restored + p.AlreadyCurrent + p.WrittenSinceStart + p.WrittenSinceChange + p.Gone + p.Failed; m.IsFinished() && sum != p.Listed {
			t.Errorf("migration %s: outcomes %+v add up to %d, not the %d listed", m.Name, p, sum, p.Listed)
		}
		listed += p.Listed
	}
	var logged int64
	for _, line := range strings.Split(string(svm.Log(t)), "\n") {
		f := outcomesLogged.FindStringSubmatch(line)
		if f == nil || !strings.Contains(line, r.Plural) {
			continue
		}
		n := make([]int64, len(f))
		for i := 2; i < len(f); i++ {
			n[i], _ = strconv.ParseInt(f[i], 10, 64)
		}
		if sum := n[3] + n[4] + n[5] + n[6] + n[7] + n[8]; sum != n[2] {
			t.Errorf("logged outcomes add up to %d, not the %d listed: %s", sum, n[2], line)
		}
		logged += n[2]
	}
	if logged != listed {
		t.Errorf("svm logged %d objects listed by the migrations of %s that ended, their statuses say %d", logged, r.Plural, listed)
	}
	code, out, errOut := framework.RunSVM(t, env.KubeconfigFile(t), time.Minute, "status", "-o", "json")
	if code != 0 {
		t.Fatalf("svm status -o json: exit %d: %s", code, errOut)
	}
	var report status.Report
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("svm status -o json: %v", err)
	}
	var shown int64
	for _, m := range report.Migrations {
		if m.Resource != r.Plural || m.Group != r.Group || m.Progress == nil {
			continue
		}
		p := m.Progress
		if sum := p.Migrated + p.WrittenSinceStart + p.WrittenSinceChange + p.Gone + p.Failed; sum != p.Listed {
			t.Errorf("svm status shows migration %s's outcomes adding up to %d, not the %d listed: %+v", m.Name, sum, p.Listed, *p)
		}
		shown += p.Listed
	}
	if shown != listed {
		t.Errorf("svm status shows %d objects listed by the migrations of %s, their statuses say %d", shown, r.Plural, listed)
	}
	m := framework.Scrape(t, metricsAddr)
	label := resources.DisplayName(schema.GroupResource{Group: r.Group, Resource: r.Plural})
	var counted float64
	for _, outcome := range []string{"restored", "already_current", "written_since_start", "written_since_change", "gone", "failed"} {
		counted += m.Value("storage_migrator_core_migrator_objects_total", "resource", label, "outcome", outcome)
	}
	if int64(counted) != listed {
		t.Errorf("objects_total counts %v objects of %s under its outcomes, the migrations listed %d", counted, label, listed)
	}
}
