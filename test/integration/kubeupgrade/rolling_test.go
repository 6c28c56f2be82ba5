// Package kubeupgrade_test upgrades a real highly available control plane,
// two kube-apiservers on one etcd, from Kubernetes 1.34 to 1.37 one minor
// and one server at a time, with the real release binaries (make matrix)
// and svm controller running, as an operator does. Each step changes the
// storage version of real built-in resources; svm must leave them alone
// while the servers disagree and migrate them once they agree, and etcd,
// read at every step, must then hold every object in the new version with
// its content unchanged.
package kubeupgrade_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1beta1 "k8s.io/api/admissionregistration/v1beta1"
	resourcev1 "k8s.io/api/resource/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/internal/upgrade"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

func TestMain(m *testing.M) {
	// The second API server runs under a hostname of its own: see
	// controlplane.StartPeer.
	controlplane.RunHostnameHelper()
	os.Exit(m.Run())
}

// moving is a built-in resource whose storage version releases change.
type moving struct {
	gr   schema.GroupResource
	kind string
	// read is a version served on every release of the upgrade, to
	// compare content in.
	read string
	// stored is the version each minor stores it in.
	stored map[string]string
}

func (m moving) hash(version string) string {
	return resources.StorageVersionHash(m.gr.Group, version, m.kind)
}

// prefix is where etcd keeps its objects: built-in resources are keyed by
// resource name alone.
func (m moving) prefix() string { return "/registry/" + m.gr.Resource + "/" }

// The storage versions of 1.34 to 1.37, as each release's
// pkg/kubeapiserver/default_storage_factory_builder.go has them.
var (
	dra      = map[string]string{"1.34": "v1beta2", "1.35": "v1", "1.36": "v1", "1.37": "v1"}
	vac      = map[string]string{"1.34": "v1beta1", "1.35": "v1beta1", "1.36": "v1", "1.37": "v1"}
	policies = map[string]string{"1.34": "v1alpha1", "1.35": "v1beta1", "1.36": "v1beta1", "1.37": "v1"}

	changes = []moving{
		{schema.GroupResource{Group: "resource.k8s.io", Resource: "deviceclasses"}, "DeviceClass", "v1", dra},
		{schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaims"}, "ResourceClaim", "v1", dra},
		{schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaimtemplates"}, "ResourceClaimTemplate", "v1", dra},
		{schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceslices"}, "ResourceSlice", "v1", dra},
		{schema.GroupResource{Group: "storage.k8s.io", Resource: "volumeattributesclasses"}, "VolumeAttributesClass", "v1", vac},
		{schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "mutatingadmissionpolicies"}, "MutatingAdmissionPolicy", "v1beta1", policies},
		{schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "mutatingadmissionpolicybindings"}, "MutatingAdmissionPolicyBinding", "v1beta1", policies},
	}
	minors = []string{"1.34", "1.35", "1.36", "1.37"}
)

const (
	n         = 8 // objects of each moving resource
	namespace = "team-a"
)

// TestRollingUpgrade134To137 upgrades two API servers 1.34 → 1.35 → 1.36
// → 1.37 under svm controller. At each step the first server is upgraded,
// and while the two disagree svm must write nothing of the resources the
// step moves (etcd's revisions of their keys stay); the second follows,
// and svm migrates them. At 1.35 svm is stopped before the servers agree:
// check-upgrade --to 1.39 then names the DRA resources as unsafe and the
// commands that fix them, and the next svm, started after, migrates them.
// At 1.36 a CRD's storage version flips as well. At the end check-upgrade
// --to 1.39 says safe, and etcd agrees; every object reads as before.
func TestRollingUpgrade134To137(t *testing.T) {
	t.Parallel()
	encryption := framework.WriteEncryptionConfig(t, t.TempDir(), framework.NewEncryptionKey(t, "key1"))
	flags := append([]string{encryption,
		// MutatingAdmissionPolicy is beta (off) before 1.36: turned on as a
		// user would, and its v1beta1 kept served to the end.
		"--feature-gates=MutatingAdmissionPolicy=true",
		"--runtime-config=admissionregistration.k8s.io/v1beta1=true",
	}, framework.StorageVersionAPIFlags...)
	env := framework.Start(t, controlplane.Options{Release: "1.34", APIServerFlags: flags})
	ctx := framework.Context(t, 20*time.Minute)
	peer, err := env.CP.StartPeer(ctx, "apiserver-b", flags...)
	if err != nil {
		t.Fatalf("start the second API server: %v", err)
	}
	t.Cleanup(func() { _ = peer.Stop() })
	t.Logf("two API servers on Kubernetes %s", env.CP.Release())

	env.InstallCRDs(t, framework.CRDBasesDir())
	env.CreateSecrets(t, []string{namespace}, 20) // creates the namespace
	env.CreateWidgetCRD(t, "v1")
	env.CreateWidgets(t, "v1", []string{namespace}, 20)
	createMovingObjects(t, env)
	for _, m := range changes {
		env.ExpectStored(t, m.prefix(), map[string]int{m.gr.Group + "/" + m.stored["1.34"]: n})
	}
	before := map[schema.GroupVersionResource]framework.Snapshot{}
	for _, gvr := range compared() {
		before[gvr] = env.TakeSnapshot(t, gvr)
	}

	kubeconfig := env.KubeconfigFile(t)
	args := framework.ControllerArgs("--trigger-interval", "2s", "--trigger-retry-delay", "2s", "--leader-elect=false")
	svm := framework.StartSVMWithKubeconfig(t, kubeconfig, args...)
	env.WaitMigrationsFinished(t, 5*time.Minute)

	for i, minor := range minors[1:] {
		previous := minors[i]
		step := movingAt(previous, minor)
		revisions := map[string]int64{}
		for _, m := range step {
			maps.Copy(revisions, env.ModRevisions(t, m.prefix()))
		}

		// The first server is upgraded; the servers now write different
		// versions of step's resources.
		upgraded := time.Now()
		if err := env.CP.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		if _, err := env.CP.SetRelease(minor); err != nil {
			t.Fatal(err)
		}
		if err := env.CP.StartAPIServer(ctx); err != nil {
			t.Fatalf("upgrade the first API server to %s: %v", minor, err)
		}
		env.WaitServerMinor(t, minor)
		for _, m := range step {
			env.WaitStorageState(t, m.gr, 2*time.Minute, "Unknown while the servers disagree", func(s *migrationv1alpha1.StorageState) bool {
				return s.Status.CurrentStorageVersionHash == migrationv1alpha1.UnknownStorageVersionHash
			})
		}
		// Several trigger rounds while they disagree: nothing written.
		time.Sleep(5 * time.Second)
		for _, m := range step {
			if diff := cmp.Diff(pick(revisions, m.prefix()), pick(env.ModRevisions(t, m.prefix()), m.prefix())); diff != "" {
				t.Errorf("%s: svm wrote %s while the API servers disagreed (-before +after):\n%s", minor, m.gr, diff)
			}
			env.ExpectStored(t, m.prefix(), map[string]int{m.gr.Group + "/" + m.stored[previous]: n})
		}
		t.Logf("%s: servers disagreed for %s; svm wrote nothing of %s", minor, time.Since(upgraded).Round(time.Second), names(step))

		if minor == "1.35" {
			// svm stops; the rollout goes on without it.
			svm.Kill()
		}
		agreed := time.Now().Truncate(time.Second)
		if err := peer.Upgrade(ctx, minor); err != nil {
			t.Fatalf("upgrade the second API server to %s: %v", minor, err)
		}
		if minor == "1.35" {
			// Both servers write v1 now, and etcd still holds v1beta2:
			// check-upgrade says so and how to fix it.
			report := env.CheckRelease(t, kubeconfig, "1.39")
			for _, m := range step {
				res := find(report, m.gr)
				want := "svm retire " + m.gr.Resource + "." + m.stored[previous] + "." + m.gr.Group
				if res.Verdict != upgrade.VerdictUnsafe || !slices.Contains(res.Fix, want) {
					t.Errorf("before svm's migration check-upgrade --to 1.39 says %s for %s with fix %v; want unsafe, fixed by %q", res.Verdict, m.gr, res.Fix, want)
				}
			}
			svm = framework.StartSVMWithKubeconfig(t, kubeconfig, args...)
		}
		if minor == "1.36" {
			env.SetStorage(t, framework.WidgetResource, "v2")
		}
		for _, m := range step {
			to := m.stored[minor]
			framework.Eventually(t, fmt.Sprintf("%s: every %s stored in %s", minor, m.gr, to), 3*time.Minute, func(context.Context) (bool, error) {
				return maps.Equal(env.StoredVersions(t, m.prefix()), map[string]int{m.gr.Group + "/" + to: n}), nil
			})
			s := env.WaitStorageState(t, m.gr, time.Minute, "recording "+to, func(s *migrationv1alpha1.StorageState) bool {
				return slices.Equal(s.Status.PersistedStorageVersionHashes, []string{m.hash(to)})
			})
			if s.Status.CurrentStorageVersionHash != m.hash(to) || s.Status.CurrentStorageVersionSince == nil || s.Status.CurrentStorageVersionSince.Time.Before(agreed) {
				t.Errorf("%s: StorageState of %s says current %s since %v; want %s (%s) since the servers agreed, at %s or later",
					minor, m.gr, s.Status.CurrentStorageVersionHash, s.Status.CurrentStorageVersionSince, m.hash(to), to, agreed.Format(time.TimeOnly))
			}
		}
		t.Logf("%s: both servers upgraded; svm migrated %s within %s of their agreement", minor, names(step), time.Since(agreed).Round(time.Second))
	}

	framework.Eventually(t, "storedVersions pruned to [v2]", 3*time.Minute, func(context.Context) (bool, error) {
		return slices.Equal(env.CRDStoredVersions(t, framework.WidgetsCRDName), []string{"v2"}), nil
	})
	env.ExpectStored(t, framework.EtcdPrefix(framework.Widgets.GroupResource()), map[string]int{"example.com/v2": 20})
	env.WaitMigrationsFinished(t, 3*time.Minute)
	for _, m := range env.Migrations(t) {
		if framework.Failed(&m) {
			t.Errorf("migration %s failed: %s", m.Name, framework.Condition(&m, migrationv1alpha1.MigrationFailed).Message)
		}
	}
	if report := env.CheckRelease(t, kubeconfig, "1.39"); report.Verdict != upgrade.VerdictSafe {
		t.Errorf("after the upgrade check-upgrade --to 1.39 says %s, want safe", report.Verdict)
	}
	for gvr, snap := range before {
		env.ExpectUnchanged(t, gvr, snap)
	}
}

// compared are the resources whose content must survive the upgrade, each
// in a version served throughout.
func compared() []schema.GroupVersionResource {
	out := []schema.GroupVersionResource{framework.Secrets, framework.Widgets}
	for _, m := range changes {
		out = append(out, m.gr.WithVersion(m.read))
	}
	return out
}

// movingAt are the resources whose storage version the upgrade from
// previous to minor changes.
func movingAt(previous, minor string) []moving {
	var out []moving
	for _, m := range changes {
		if m.stored[previous] != m.stored[minor] {
			out = append(out, m)
		}
	}
	return out
}

func names(ms []moving) string {
	var out []string
	for _, m := range ms {
		out = append(out, m.gr.String())
	}
	return strings.Join(out, ", ")
}

// pick are the revisions of the keys under prefix.
func pick(revisions map[string]int64, prefix string) map[string]int64 {
	out := map[string]int64{}
	for k, v := range revisions {
		if strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out
}

func find(r upgrade.Report, gr schema.GroupResource) upgrade.Resource {
	for _, res := range r.Resources {
		if res.Group == gr.Group && res.Resource == gr.Resource {
			return res
		}
	}
	return upgrade.Resource{Name: gr.String(), Verdict: "not in the report"}
}

// createMovingObjects creates n objects of each resource in changes,
// through the versions 1.34 serves.
func createMovingObjects(t *testing.T, env *framework.Env) {
	t.Helper()
	ctx := framework.Context(t, 2*time.Minute)
	for i := range n {
		name := fmt.Sprintf("obj-%02d", i)
		meta := metav1.ObjectMeta{Name: name, Labels: map[string]string{"index": fmt.Sprint(i)}}
		nsMeta := *meta.DeepCopy()
		nsMeta.Namespace = namespace
		selector := []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: fmt.Sprintf(`device.driver == "gpu-%d.example.com"`, i)}}}
		var errs []error
		_, err := env.Kube.ResourceV1().DeviceClasses().Create(ctx, &resourcev1.DeviceClass{ObjectMeta: meta, Spec: resourcev1.DeviceClassSpec{Selectors: selector}}, metav1.CreateOptions{})
		errs = append(errs, err)
		claim := resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: name, Count: int64(i + 1), AllocationMode: resourcev1.DeviceAllocationModeExactCount},
		}}}}
		_, err = env.Kube.ResourceV1().ResourceClaims(namespace).Create(ctx, &resourcev1.ResourceClaim{ObjectMeta: nsMeta, Spec: claim}, metav1.CreateOptions{})
		errs = append(errs, err)
		_, err = env.Kube.ResourceV1().ResourceClaimTemplates(namespace).Create(ctx, &resourcev1.ResourceClaimTemplate{ObjectMeta: nsMeta, Spec: resourcev1.ResourceClaimTemplateSpec{Spec: claim}}, metav1.CreateOptions{})
		errs = append(errs, err)
		_, err = env.Kube.ResourceV1().ResourceSlices().Create(ctx, &resourcev1.ResourceSlice{ObjectMeta: meta, Spec: resourcev1.ResourceSliceSpec{
			Driver: fmt.Sprintf("gpu-%d.example.com", i), AllNodes: ptr.To(true),
			Pool:    resourcev1.ResourcePool{Name: "pool", Generation: 1, ResourceSliceCount: 1},
			Devices: []resourcev1.Device{{Name: "gpu-0"}},
		}}, metav1.CreateOptions{})
		errs = append(errs, err)
		_, err = env.Kube.StorageV1().VolumeAttributesClasses().Create(ctx, &storagev1.VolumeAttributesClass{ObjectMeta: meta, DriverName: "csi.example.com", Parameters: map[string]string{"iops": fmt.Sprint(1000 * (i + 1))}}, metav1.CreateOptions{})
		errs = append(errs, err)
		_, err = env.Kube.AdmissionregistrationV1beta1().MutatingAdmissionPolicies().Create(ctx, &admissionregistrationv1beta1.MutatingAdmissionPolicy{ObjectMeta: meta, Spec: admissionregistrationv1beta1.MutatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1beta1.MatchResources{ResourceRules: []admissionregistrationv1beta1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1beta1.RuleWithOperations{
					Operations: []admissionregistrationv1beta1.OperationType{admissionregistrationv1beta1.Create},
					Rule:       admissionregistrationv1beta1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				},
			}}},
			Mutations: []admissionregistrationv1beta1.Mutation{{
				PatchType:          admissionregistrationv1beta1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionregistrationv1beta1.ApplyConfiguration{Expression: fmt.Sprintf(`Object{metadata: Object.metadata{labels: {"policy": "%s"}}}`, name)},
			}},
			ReinvocationPolicy: admissionregistrationv1beta1.NeverReinvocationPolicy,
		}}, metav1.CreateOptions{})
		errs = append(errs, err)
		_, err = env.Kube.AdmissionregistrationV1beta1().MutatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1beta1.MutatingAdmissionPolicyBinding{ObjectMeta: meta, Spec: admissionregistrationv1beta1.MutatingAdmissionPolicyBindingSpec{
			PolicyName:     name,
			MatchResources: &admissionregistrationv1beta1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"policy": name}}},
		}}, metav1.CreateOptions{})
		errs = append(errs, err)
		for _, err := range errs {
			if err != nil {
				t.Fatalf("create %s: %v", name, err)
			}
		}
	}
}
