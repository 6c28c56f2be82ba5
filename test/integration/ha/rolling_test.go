package ha_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiserverinternalv1alpha1 "k8s.io/api/apiserverinternal/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

func TestMain(m *testing.M) {
	// Peers run under hostnames of their own: see controlplane.StartPeer.
	controlplane.RunHostnameHelper()
	os.Exit(m.Run())
}

// The resource the rolling upgrade changes. kube-apiserver v1.37 stores a
// built-in resource in the newest version that the oldest release it must
// stay compatible with (--min-compatibility-version, by default the
// release before its own) can read. MutatingAdmissionPolicy's v1 was
// introduced in 1.36: a server compatible with 1.35 stores it in v1beta1,
// one compatible with 1.36 in v1. An operator whose servers came from 1.35
// raises the compatibility version server by server once every server runs
// 1.37: during that rollout the servers really write different versions,
// and the StorageVersion API says so.
var (
	policies     = schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "mutatingadmissionpolicies"}
	policiesV1   = admissionregistrationv1.SchemeGroupVersion.WithResource(policies.Resource)
	policiesName = resources.StorageVersionName(policies)
	oldHash      = resources.StorageVersionHash(policies.Group, "v1beta1", "MutatingAdmissionPolicy")
	newHash      = resources.StorageVersionHash(policies.Group, "v1", "MutatingAdmissionPolicy")
	// Built-in resources are keyed by resource name alone.
	policiesKeys = "/registry/" + policies.Resource + "/"
	compatible35 = append(slices.Clone(framework.StorageVersionAPIFlags), "--min-compatibility-version=1.35")
)

// TestRollingUpgradeServersDisagree runs two kube-apiserver processes on
// one etcd, each with an identity of its own: the first still compatible
// with 1.35, the second raised. The servers then encode
// MutatingAdmissionPolicies in different versions. svm, talking to the
// raised server (whose discovery already shows the new version), must not
// migrate while they disagree: its StorageState says Unknown and lists both
// versions. When the first server is raised too, they agree, and svm
// migrates: etcd then holds every object in the agreed version. (The voting
// design's first scenario, servers switching one by one.)
func TestRollingUpgradeServersDisagree(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{APIServerFlags: compatible35})
	env.InstallCRDs(t, framework.CRDBasesDir())
	createPolicies(t, env.Kube, "by-a", 30)
	env.ExpectStored(t, policiesKeys, map[string]int{policies.Group + "/v1beta1": 30})

	peer, err := env.CP.StartPeer(framework.Context(t, 3*time.Minute), "apiserver-b", framework.StorageVersionAPIFlags...)
	if err != nil {
		t.Fatalf("start the second API server: %v", err)
	}
	t.Cleanup(func() { _ = peer.Stop() })
	sv := waitStorageVersion(t, env, "the servers disagree", func(sv *storageVersion) bool {
		return len(sv.Status.StorageVersions) == 2 && sv.Status.CommonEncodingVersion == nil
	})
	t.Logf("servers report %s", describe(sv))
	peerKube := kubernetes.NewForConfigOrDie(peer.RESTConfig())
	createPolicies(t, peerKube, "by-b", 10)
	env.ExpectStored(t, policiesKeys, map[string]int{policies.Group + "/v1beta1": 30, policies.Group + "/v1": 10})

	framework.StartSVMWithKubeconfig(t, peerKubeconfig(t, env, peer), "controller", "--leader-elect=false",
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--max-parallel", "4", "--trigger-interval", "2s")
	state := env.WaitStorageState(t, policies, 3*time.Minute, "Unknown while the servers disagree", func(s *migrationv1alpha1.StorageState) bool {
		return s.Status.CurrentStorageVersionHash == migrationv1alpha1.UnknownStorageVersionHash &&
			slices.Contains(s.Status.PersistedStorageVersionHashes, oldHash) && slices.Contains(s.Status.PersistedStorageVersionHashes, newHash)
	})
	t.Logf("storage state while the servers disagree: %+v", state.Status)
	// Several trigger rounds later, still no migration of the resource.
	time.Sleep(6 * time.Second)
	if ms := migrationsOf(t, env, policies); len(ms) > 0 {
		t.Fatalf("svm made migrations of %s while the servers disagreed: %v", policies, names(ms))
	}
	env.ExpectStored(t, policiesKeys, map[string]int{policies.Group + "/v1beta1": 30, policies.Group + "/v1": 10})

	// The last write of the server not yet raised, in v1beta1, comes
	// just before it is: the revision svm records once the servers agree
	// must be newer, or the migration would skip the object as written
	// in v1.
	lastOld := relabel(t, env.Kube, "by-a-000")
	before := env.TakeSnapshot(t, policiesV1)

	// The rollout completes: the first server is raised too.
	env.CP.SetAPIServerFlags(framework.StorageVersionAPIFlags...)
	if err := env.CP.RestartAPIServer(framework.Context(t, 3*time.Minute)); err != nil {
		t.Fatalf("restart the first API server: %v", err)
	}
	sv = waitStorageVersion(t, env, "the servers agree", func(sv *storageVersion) bool {
		return sv.Status.CommonEncodingVersion != nil && *sv.Status.CommonEncodingVersion == policies.Group+"/v1"
	})
	t.Logf("servers report %s", describe(sv))
	state = env.WaitStorageState(t, policies, 3*time.Minute, "migrated after agreement", func(s *migrationv1alpha1.StorageState) bool {
		return slices.Equal(s.Status.PersistedStorageVersionHashes, []string{newHash})
	})
	if r, w := state.Status.CurrentStorageVersionRevision, lastOld; framework.Revision(t, r) <= framework.Revision(t, w) {
		t.Errorf("revision %q recorded for the agreed version, want one newer than the old server's last write at %s", r, w)
	}
	env.ExpectStored(t, policiesKeys, map[string]int{policies.Group + "/v1": 40})
	env.ExpectUnchanged(t, policiesV1, before)
	for _, m := range migrationsOf(t, env, policies) {
		if m.HasCondition(migrationv1alpha1.MigrationSucceeded) && m.Status.StorageVersionHash != newHash {
			t.Errorf("migration %s succeeded for hash %s, not the agreed %s", m.Name, m.Status.StorageVersionHash, newHash)
		}
		// Every object was written before the servers agreed: none is
		// skipped as written since, the old server's last one included.
		if p := m.Status.Progress; m.HasCondition(migrationv1alpha1.MigrationSucceeded) && (p.WrittenSinceChange != 0 || p.Restored < 30) {
			t.Errorf("migration %s: progress %+v, want the 30 objects in v1beta1 re-stored and none skipped as written since the change", m.Name, p)
		}
	}
	framework.Scenario{Name: "rolling upgrade, servers disagree then agree", Objects: 40, Writes: -1, Retries: -1, Verified: !t.Failed()}.Report(t)
}

type storageVersion = apiserverinternalv1alpha1.StorageVersion

// relabel writes a MutatingAdmissionPolicy through kube's server and
// returns the resourceVersion of the write.
func relabel(t *testing.T, kube kubernetes.Interface, name string) string {
	t.Helper()
	p, err := kube.AdmissionregistrationV1().MutatingAdmissionPolicies().Patch(framework.Context(t, time.Minute), name, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"written-by":"old-server"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("write %s: %v", name, err)
	}
	return p.ResourceVersion
}

// createPolicies creates n MutatingAdmissionPolicies, bound to nothing, so
// they change no request.
func createPolicies(t *testing.T, kube kubernetes.Interface, prefix string, n int) {
	t.Helper()
	ctx := framework.Context(t, time.Minute)
	for i := range n {
		p := &admissionregistrationv1.MutatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%03d", prefix, i), Labels: map[string]string{"index": fmt.Sprint(i)}},
			Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
				MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionregistrationv1.RuleWithOperations{
						Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
						Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
					},
				}}},
				Mutations: []admissionregistrationv1.Mutation{{
					PatchType: admissionregistrationv1.PatchTypeApplyConfiguration,
					ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{
						Expression: fmt.Sprintf(`Object{metadata: Object.metadata{labels: {"policy": "%s-%03d"}}}`, prefix, i),
					},
				}},
				ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
			},
		}
		if _, err := kube.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", p.Name, err)
		}
	}
}

func waitStorageVersion(t *testing.T, env *framework.Env, what string, cond func(*storageVersion) bool) *storageVersion {
	t.Helper()
	var sv *storageVersion
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := env.Kube.InternalV1alpha1().StorageVersions().Get(ctx, policiesName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		sv = got
		return cond(sv), nil
	})
	if err != nil {
		t.Fatalf("StorageVersion %s: not %s: %v; last seen %s", policiesName, what, err, describe(sv))
	}
	return sv
}

func describe(sv *storageVersion) string {
	if sv == nil {
		return "nothing"
	}
	common := "none"
	if sv.Status.CommonEncodingVersion != nil {
		common = *sv.Status.CommonEncodingVersion
	}
	out := "common " + common + ";"
	for _, s := range sv.Status.StorageVersions {
		out += " " + s.APIServerID + "=" + s.EncodingVersion
	}
	return out
}

func migrationsOf(t *testing.T, env *framework.Env, gr schema.GroupResource) []migrationv1alpha1.StorageVersionMigration {
	t.Helper()
	var out []migrationv1alpha1.StorageVersionMigration
	for _, m := range listMigrations(t, env) {
		if m.Spec.Resource.Group == gr.Group && m.Spec.Resource.Resource == gr.Resource {
			out = append(out, m)
		}
	}
	return out
}

func names(ms []migrationv1alpha1.StorageVersionMigration) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

// peerKubeconfig writes an admin kubeconfig for the peer.
func peerKubeconfig(t *testing.T, env *framework.Env, peer *controlplane.Peer) string {
	t.Helper()
	cfg := env.CP.Kubeconfig()
	for _, c := range cfg.Clusters {
		c.Server = peer.URL
	}
	path := filepath.Join(t.TempDir(), "peer-kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRollingUpgradeServersSwitchTogether: both API servers keep the old
// version until the rollout ends, then both move to the new one (the voting
// design's second scenario). Here both are stopped and started again with
// the raised compatibility version; svm rides out the outage, sees the
// common version change through its watch, and migrates every object to
// the new version once the servers agree on it.
func TestRollingUpgradeServersSwitchTogether(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{APIServerFlags: compatible35})
	env.InstallCRDs(t, framework.CRDBasesDir())
	peer, err := env.CP.StartPeer(framework.Context(t, 3*time.Minute), "apiserver-b", compatible35...)
	if err != nil {
		t.Fatalf("start the second API server: %v", err)
	}
	t.Cleanup(func() { _ = peer.Stop() })
	createPolicies(t, env.Kube, "by-a", 20)
	createPolicies(t, kubernetes.NewForConfigOrDie(peer.RESTConfig()), "by-b", 20)
	waitStorageVersion(t, env, "both on the old version", func(sv *storageVersion) bool {
		return len(sv.Status.StorageVersions) == 2 && sv.Status.CommonEncodingVersion != nil && *sv.Status.CommonEncodingVersion == policies.Group+"/v1beta1"
	})
	env.ExpectStored(t, policiesKeys, map[string]int{policies.Group + "/v1beta1": 40})
	before := env.TakeSnapshot(t, policiesV1)

	env.StartSVM(t, "controller", "--leader-elect=false", "--metrics-bind-address", "0", "--health-probe-bind-address", "0",
		"--max-parallel", "4", "--trigger-interval", "2s")
	env.WaitStorageState(t, policies, 3*time.Minute, "migrated to the old version", func(s *migrationv1alpha1.StorageState) bool {
		return slices.Equal(s.Status.PersistedStorageVersionHashes, []string{oldHash})
	})

	// The switch: both servers stop, and come back raised.
	if err := peer.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := env.CP.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	env.CP.SetAPIServerFlags(framework.StorageVersionAPIFlags...)
	if err := env.CP.StartAPIServer(framework.Context(t, 3*time.Minute)); err != nil {
		t.Fatalf("start the first API server again: %v", err)
	}
	if peer, err = env.CP.StartPeer(framework.Context(t, 3*time.Minute), "apiserver-b", framework.StorageVersionAPIFlags...); err != nil {
		t.Fatalf("start the second API server again: %v", err)
	}
	sv := waitStorageVersion(t, env, "both on the new version", func(sv *storageVersion) bool {
		return len(sv.Status.StorageVersions) == 2 && sv.Status.CommonEncodingVersion != nil && *sv.Status.CommonEncodingVersion == policies.Group+"/v1"
	})
	t.Logf("servers report %s", describe(sv))
	env.WaitStorageState(t, policies, 3*time.Minute, "migrated to the new version", func(s *migrationv1alpha1.StorageState) bool {
		return slices.Equal(s.Status.PersistedStorageVersionHashes, []string{newHash})
	})
	env.ExpectStored(t, policiesKeys, map[string]int{policies.Group + "/v1": 40})
	env.ExpectUnchanged(t, policiesV1, before)
	framework.Scenario{Name: "rolling upgrade, servers switch together", Objects: 40, Writes: -1, Retries: -1, Verified: !t.Failed()}.Report(t)
}
