package ha_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/apiservers"
	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/internal/retirereport"
	"github.com/svm-project/svm/internal/status"
	"github.com/svm-project/svm/internal/upgrade"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// DeviceClasses are stored in v1beta2 by Kubernetes 1.34 and in v1 by
// 1.35, which both serve v1 by default.
var (
	deviceClasses        = schema.GroupResource{Group: "resource.k8s.io", Resource: "deviceclasses"}
	deviceClassesV1      = deviceClasses.WithVersion("v1")
	deviceClassesKeys    = "/registry/" + deviceClasses.Resource + "/"
	deviceClassesOldHash = resources.StorageVersionHash(deviceClasses.Group, "v1beta2", "DeviceClass")
	deviceClassesNewHash = resources.StorageVersionHash(deviceClasses.Group, "v1", "DeviceClass")
)

// TestBuiltInNotMigratedWhileAnOldServerRuns runs a 1.35 API server and a
// 1.34 one on one etcd, without the StorageVersion API, as in the middle
// of a rolling upgrade; svm talks to the 1.35 server, whose discovery
// already shows DeviceClasses' new storage version, while writes through
// the 1.34 server still land in the old one. svm, given both servers'
// addresses, must not record DeviceClasses as migrated to the new version
// while the old server runs, nor migrate them (a write through the old
// server while svm runs lands in the old version), and svm retire and svm
// check-upgrade must not call the old version empty. Once the old server
// is gone (its identity lease no longer renewed), svm migrates them once
// and records the new version, with a revision after the old server's
// last write; etcd then holds every DeviceClass in v1, content unchanged.
func TestBuiltInNotMigratedWhileAnOldServerRuns(t *testing.T) {
	t.Parallel()
	const n = 6
	env := framework.Start(t, controlplane.Options{Release: "1.35"})
	ctx := framework.Context(t, 20*time.Minute)
	if _, err := env.CP.SetRelease("1.34"); err != nil {
		t.Fatal(err)
	}
	old, err := env.CP.StartPeer(ctx, "apiserver-old")
	if err != nil {
		t.Fatalf("start the 1.34 API server: %v", err)
	}
	t.Cleanup(func() { _ = old.Stop() })
	if _, err := env.CP.SetRelease("1.35"); err != nil {
		t.Fatal(err)
	}
	env.InstallCRDs(t, framework.CRDBasesDir())
	createDeviceClasses(t, env.Kube, "by-new", n)
	oldKube := kubernetes.NewForConfigOrDie(old.RESTConfig())
	createDeviceClasses(t, oldKube, "by-old", n)
	env.ExpectStored(t, deviceClassesKeys, map[string]int{deviceClasses.Group + "/v1": n, deviceClasses.Group + "/v1beta2": n})
	revisions := env.ModRevisions(t, deviceClassesKeys)

	kubeconfig := env.KubeconfigFile(t)
	env.StartSVM(t, framework.ControllerArgs("--leader-elect=false", "--trigger-interval", "2s", "--trigger-retry-delay", "2s",
		"--apiserver-endpoints", env.CP.APIServerURL+","+old.URL)...)
	s := env.WaitStorageState(t, deviceClasses, 2*time.Minute, "Unknown while the servers disagree", func(s *migrationv1alpha1.StorageState) bool {
		return s.Status.CurrentStorageVersionHash == migrationv1alpha1.UnknownStorageVersionHash && s.Status.ServersDisagree != ""
	})
	for _, h := range []string{deviceClassesOldHash, deviceClassesNewHash} {
		if !slices.Contains(s.Status.PersistedStorageVersionHashes, h) {
			t.Errorf("while the servers disagree the StorageState persists %v; want %s among them", s.Status.PersistedStorageVersionHashes, h)
		}
	}
	if !strings.Contains(s.Status.ServersDisagree, old.URL) {
		t.Errorf("serversDisagree %q does not name the 1.34 server, %s", s.Status.ServersDisagree, old.URL)
	}
	expectStatusSays(t, kubeconfig, s.Status.ServersDisagree)

	// Several trigger rounds while they disagree: nothing written.
	time.Sleep(10 * time.Second)
	if ms := migrationsOf(t, env, deviceClasses); len(ms) != 0 {
		t.Errorf("svm made %d migrations of %s while the servers disagreed: %v", len(ms), deviceClasses, names(ms))
	}
	if diff := cmp.Diff(revisions, env.ModRevisions(t, deviceClassesKeys)); diff != "" {
		t.Errorf("svm wrote %s while the servers disagreed (-before +after):\n%s", deviceClasses, diff)
	}
	// A write through the old server while svm runs lands in v1beta2.
	createDeviceClasses(t, oldKube, "late", 1)
	env.ExpectStored(t, deviceClassesKeys, map[string]int{deviceClasses.Group + "/v1": n, deviceClasses.Group + "/v1beta2": n + 1})
	expectOldVersionNotEmpty(t, env, kubeconfig)
	before := env.TakeSnapshot(t, deviceClassesV1)

	// The rollout ends: the old server goes, its lease stops being renewed.
	lastOld := maxRevision(env.ModRevisions(t, deviceClassesKeys))
	stopped := time.Now()
	if err := old.Stop(); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, "every DeviceClass stored in v1", apiservers.LiveWithin+3*time.Minute, func(context.Context) (bool, error) {
		return maps.Equal(env.StoredVersions(t, deviceClassesKeys), map[string]int{deviceClasses.Group + "/v1": 2*n + 1}), nil
	})
	t.Logf("svm migrated %s %s after the old server stopped", deviceClasses, time.Since(stopped).Round(time.Second))
	s = env.WaitStorageState(t, deviceClasses, time.Minute, "migrated to v1", func(s *migrationv1alpha1.StorageState) bool {
		return slices.Equal(s.Status.PersistedStorageVersionHashes, []string{deviceClassesNewHash})
	})
	if s.Status.CurrentStorageVersionHash != deviceClassesNewHash || s.Status.ServersDisagree != "" {
		t.Errorf("after the migration the StorageState says current %s, serversDisagree %q; want %s and no disagreement",
			s.Status.CurrentStorageVersionHash, s.Status.ServersDisagree, deviceClassesNewHash)
	}
	if rev := s.Status.CurrentStorageVersionRevision; rev == "" || mustInt(t, rev) <= lastOld {
		t.Errorf("the StorageState records revision %q; want one after the old server's last write (%d)", rev, lastOld)
	}
	ms := migrationsOf(t, env, deviceClasses)
	if len(ms) != 1 || !framework.Succeeded(&ms[0]) || ms[0].CreationTimestamp.Time.Before(stopped.Truncate(time.Second)) {
		t.Errorf("svm's migrations of %s: %v; want one, made after the old server stopped, succeeded", deviceClasses, names(ms))
	}
	env.ExpectUnchanged(t, deviceClassesV1, before)
	report := env.CheckRelease(t, kubeconfig, "1.39")
	if r := findResource(report, deviceClasses); r.Verdict == upgrade.VerdictUnsafe {
		t.Errorf("after the migration check-upgrade --to 1.39 says %s is unsafe: %+v", deviceClasses, r)
	}
}

// expectOldVersionNotEmpty: svm retire and svm check-upgrade, asked while
// the old server writes the old version, say objects may be stored in it.
func expectOldVersionNotEmpty(t *testing.T, env *framework.Env, kubeconfig string) {
	t.Helper()
	name := deviceClasses.Resource + ".v1beta2." + deviceClasses.Group
	code, out, errOut := framework.RunSVM(t, kubeconfig, 2*time.Minute, "retire", name, "--dry-run", "-o", "json")
	var r retirereport.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("svm retire %s --dry-run -o json exited %d: %v\n%s\n%s", name, code, err, out, errOut)
	}
	if !r.MayBeStored {
		t.Errorf("svm retire %s --dry-run says nothing may be stored in it while a server writes it: %s", name, out)
	}
	report := env.CheckRelease(t, kubeconfig, "1.39")
	if r := findResource(report, deviceClasses); r.Verdict != upgrade.VerdictUnsafe || !r.ServersDisagree || len(r.Fix) > 0 {
		t.Errorf("while a server writes v1beta2 check-upgrade --to 1.39 says %s for %s (servers disagree: %v, fix %q); want unsafe, the servers apart, no retirement offered: %+v",
			r.Verdict, deviceClasses, r.ServersDisagree, r.Fix, r)
	}
}

// expectStatusSays: svm status shows what serversDisagree says.
func expectStatusSays(t *testing.T, kubeconfig, disagreement string) {
	t.Helper()
	code, out, errOut := framework.RunSVM(t, kubeconfig, time.Minute, "status", "-o", "json")
	var r status.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("svm status -o json exited %d: %v\n%s\n%s", code, err, out, errOut)
	}
	i := slices.IndexFunc(r.StorageStates, func(s status.StorageState) bool {
		return s.Group == deviceClasses.Group && s.Resource == deviceClasses.Resource
	})
	if i < 0 || r.StorageStates[i].ServersDisagree != disagreement {
		t.Errorf("svm status -o json does not show the disagreement %q for %s:\n%s", disagreement, deviceClasses, out)
	}
}

// createDeviceClasses creates n DeviceClasses named prefix-i through kube.
func createDeviceClasses(t *testing.T, kube kubernetes.Interface, prefix string, n int) {
	t.Helper()
	ctx := framework.Context(t, time.Minute)
	for i := range n {
		name := fmt.Sprintf("%s-%02d", prefix, i)
		selector := []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf(`device.driver == "%s.example.com"`, name)}}}
		dc := &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"index": fmt.Sprint(i)}}, Spec: resourcev1.DeviceClassSpec{Selectors: selector}}
		if _, err := kube.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create DeviceClass %s: %v", name, err)
		}
	}
}

func findResource(r upgrade.Report, gr schema.GroupResource) upgrade.Resource {
	for _, res := range r.Resources {
		if res.Group == gr.Group && res.Resource == gr.Resource {
			return res
		}
	}
	return upgrade.Resource{Name: gr.String(), Verdict: "not in the report"}
}

func maxRevision(revisions map[string]int64) int64 {
	var out int64
	for _, r := range revisions {
		out = max(out, r)
	}
	return out
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	var v int64
	if _, err := fmt.Sscan(s, &v); err != nil {
		t.Fatalf("revision %q: %v", s, err)
	}
	return v
}
