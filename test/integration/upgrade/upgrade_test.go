// Package upgrade_test runs `svm check-upgrade` against a real control
// plane around a CRD storage flip and an API server upgrade, and checks
// each verdict against what etcd really holds.
package upgrade_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apiserverinternalv1alpha1 "k8s.io/api/apiserverinternal/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/cli"
	"github.com/svm-project/svm/internal/kubeclients"
	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/internal/trigger"
	"github.com/svm-project/svm/internal/upgrade"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

var (
	hashV1 = resources.StorageVersionHash("example.com", "v1", "Widget")
	hashV2 = resources.StorageVersionHash("example.com", "v2", "Widget")
)

// controllerArgs run svm's controller with a trigger round every second, so
// that it sees storage changes at once, and a short retry delay.
var controllerArgs = framework.ControllerArgs("--trigger-interval", "1s", "--trigger-retry-delay", "2s")

// checkUpgrade runs `svm check-upgrade -o json` with args, expects exit
// code want, and returns the report.
func checkUpgrade(t *testing.T, kubeconfig string, want int, args ...string) *upgrade.Report {
	t.Helper()
	code, stdout, stderr := framework.RunSVM(t, kubeconfig, 2*time.Minute, append([]string{"check-upgrade", "-o", "json"}, args...)...)
	if code != want {
		t.Fatalf("svm check-upgrade %v exited %d, want %d\nstdout:\n%s\nstderr:\n%s", args, code, want, stdout, stderr)
	}
	r := &upgrade.Report{}
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	if err := dec.Decode(r); err != nil {
		t.Fatalf("decode the report: %v\n%s", err, stdout)
	}
	if r.Version != upgrade.Version {
		t.Errorf("report version %q, want %q", r.Version, upgrade.Version)
	}
	return r
}

// only returns the one resource r judged.
func only(t *testing.T, r *upgrade.Report) upgrade.Resource {
	t.Helper()
	if len(r.Resources) != 1 {
		t.Fatalf("%d resources in the report, want 1: %+v", len(r.Resources), r.Resources)
	}
	return r.Resources[0]
}

// stored is what the report says may be stored, with its sources.
func stored(res upgrade.Resource) map[string][]upgrade.Source {
	out := map[string][]upgrade.Source{}
	for _, s := range res.Stored {
		out[s.Version] = s.Sources
	}
	return out
}

func expectResource(t *testing.T, res upgrade.Resource, verdict upgrade.Verdict, wantStored map[string][]upgrade.Source, notDecodable ...string) {
	t.Helper()
	if res.Verdict != verdict {
		t.Errorf("%s: verdict %s, want %s; reasons %q", res.Name, res.Verdict, verdict, res.Reasons)
	}
	if diff := cmp.Diff(wantStored, stored(res)); diff != "" {
		t.Errorf("%s: stored versions (-want +got):\n%s", res.Name, diff)
	}
	if diff := cmp.Diff(append([]string{}, notDecodable...), res.NotDecodable); diff != "" {
		t.Errorf("%s: not decodable (-want +got):\n%s", res.Name, diff)
	}
}

func persisted(want ...string) func(*migrationv1alpha1.StorageState) bool {
	return func(s *migrationv1alpha1.StorageState) bool {
		return slices.Equal(want, s.Status.PersistedStorageVersionHashes)
	}
}

// TestCheckUpgradeCustomResource follows a CRD whose storage moves from v1
// to v2 and asks, at each step, whether an API server that decodes only v2
// could read every widget. Each answer is checked against etcd.
func TestCheckUpgradeCustomResource(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{})
	kubeconfig := env.KubeconfigFile(t)
	env.InstallCRDs(t, framework.CRDBasesDir())
	env.CreateWidgetCRD(t, "v1")
	const n = 40
	env.CreateWidgets(t, "v1", []string{"default"}, n)
	prefix := framework.EtcdPrefix(framework.Widgets.GroupResource())
	widgets := framework.Widgets.GroupResource()

	// The hash svm maps back to versions is the one discovery reports.
	if got := env.StorageVersionHash(t, framework.Widgets); got != hashV1 {
		t.Fatalf("discovery reports %s for widgets stored as v1, svm computes %s", got, hashV1)
	}

	t.Run("no target", func(t *testing.T) {
		code, _, stderr := framework.RunSVM(t, kubeconfig, time.Minute, "check-upgrade")
		if code != 1 || !strings.Contains(stderr, "say what the target API server is or decodes: --to RELEASE") {
			t.Errorf("exit %d, stderr %q; want 1 and a usage hint", code, stderr)
		}
	})

	svm := env.StartSVM(t, controllerArgs...)
	env.WaitStorageState(t, widgets, 3*time.Minute, "first migration", persisted(hashV1))
	v1Sources := []upgrade.Source{upgrade.SourceCRDStoredVersions, upgrade.SourceDiscovery, upgrade.SourceStorageState}

	// Everything is in v1: a target that reads v1 is safe; one that reads
	// only v2 is not.
	r := checkUpgrade(t, kubeconfig, 0, "--decodable", "widgets.example.com=v1")
	expectResource(t, only(t, r), upgrade.VerdictSafe, map[string][]upgrade.Source{"example.com/v1": v1Sources})
	// Other resources svm knows of are listed as not checked: svm's own
	// CRDs are there whatever the trigger has done so far.
	if !slices.Contains(r.NotChecked, "storagestates.migration.k8s.io") || slices.Contains(r.NotChecked, "widgets.example.com") {
		t.Errorf("not checked %v: want svm's CRDs and not widgets", r.NotChecked)
	}
	r = checkUpgrade(t, kubeconfig, cli.ExitUnsafe, "--decodable", "widgets.example.com=v2")
	expectResource(t, only(t, r), upgrade.VerdictUnsafe, map[string][]upgrade.Source{"example.com/v1": v1Sources}, "example.com/v1")

	// svm is stopped and the storage flips: nothing rewrites the widgets.
	if !svm.Stop(time.Minute) {
		t.Fatal("svm did not stop within a minute")
	}
	env.SetCRDStorageVersion(t, framework.WidgetsCRDName, "v2")
	if got := env.WaitStorageVersionHashChange(t, framework.Widgets, hashV1); got != hashV2 {
		t.Fatalf("discovery reports %s for widgets stored as v2, svm computes %s", got, hashV2)
	}
	t.Run("flipped while svm was stopped", func(t *testing.T) {
		r := checkUpgrade(t, kubeconfig, cli.ExitUnsafe, "--decodable", "widgets.example.com=v2")
		res := only(t, r)
		expectResource(t, res, upgrade.VerdictUnsafe, map[string][]upgrade.Source{
			"example.com/v1": {upgrade.SourceCRDStoredVersions, upgrade.SourceStorageState},
			"example.com/v2": {upgrade.SourceCRDStoredVersions, upgrade.SourceDiscovery},
		}, "example.com/v1")
		if !slices.ContainsFunc(res.Reasons, func(s string) bool { return strings.Contains(s, "svm has not recorded the current storage version") }) {
			t.Errorf("reasons %q do not say svm missed the change", res.Reasons)
		}
		env.ExpectStored(t, prefix, map[string]int{"example.com/v1": n})

		// The table says the same, and names v1.
		code, stdout, stderr := framework.RunSVM(t, kubeconfig, 2*time.Minute, "check-upgrade", "--decodable", "widgets.example.com=v2")
		if code != cli.ExitUnsafe || !strings.Contains(stdout, "the target cannot decode v1 (CRD storedVersions, StorageState)") ||
			!strings.Contains(stdout, "\nunsafe: 1 of 1 resource checked may hold objects the target cannot read\n") {
			t.Errorf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
	})

	// A webhook refuses the rewrite of one widget: svm records both hashes,
	// rewrites every other widget, and its migration fails.
	framework.StartDenyingWebhook(t, env, framework.WidgetResource, map[string]bool{"default/widget-00007": true})
	env.StartSVM(t, controllerArgs...)
	env.WaitStorageState(t, widgets, 3*time.Minute, "both hashes recorded", persisted(hashV1, hashV2))
	waitFailedMigration(t, env, hashV2)
	t.Run("migration failed on one object", func(t *testing.T) {
		target := filepath.Join(t.TempDir(), "target.yaml")
		if err := os.WriteFile(target, []byte("version: v1\ndecodable:\n  widgets.example.com: [v2]\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		r := checkUpgrade(t, kubeconfig, cli.ExitUnsafe, "-f", target)
		expectResource(t, only(t, r), upgrade.VerdictUnsafe, map[string][]upgrade.Source{
			"example.com/v1": {upgrade.SourceCRDStoredVersions, upgrade.SourceStorageState},
			"example.com/v2": {upgrade.SourceCRDStoredVersions, upgrade.SourceDiscovery, upgrade.SourceStorageState},
		}, "example.com/v1")
		// It is right to: one widget is still v1 in etcd.
		env.ExpectStored(t, prefix, map[string]int{"example.com/v1": 1, "example.com/v2": n - 1})
	})

	// Without the webhook the next retry rewrites the last widget.
	if err := env.Kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(framework.Context(t, time.Minute),
		"test-"+framework.WidgetsCRDName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	env.WaitStorageState(t, widgets, 3*time.Minute, "migrated to v2", persisted(hashV2))
	framework.Eventually(t, "storedVersions [v2]", time.Minute, func(context.Context) (bool, error) {
		return slices.Equal(env.CRDStoredVersions(t, framework.WidgetsCRDName), []string{"v2"}), nil
	})
	t.Run("migrated", func(t *testing.T) {
		r := checkUpgrade(t, kubeconfig, 0, "--decodable", "widgets.example.com=v2")
		expectResource(t, only(t, r), upgrade.VerdictSafe, map[string][]upgrade.Source{
			"example.com/v2": {upgrade.SourceCRDStoredVersions, upgrade.SourceDiscovery, upgrade.SourceStorageState},
		})
		env.ExpectStored(t, prefix, map[string]int{"example.com/v2": n})
	})
}

// waitFailedMigration waits until one of svm's migrations to hash has
// failed.
func waitFailedMigration(t *testing.T, env *framework.Env, hash string) {
	t.Helper()
	framework.Eventually(t, "a failed migration to "+hash, 3*time.Minute, func(ctx context.Context) (bool, error) {
		var list migrationv1alpha1.StorageVersionMigrationList
		if err := env.Client.List(ctx, &list); err != nil {
			return false, err
		}
		return slices.ContainsFunc(list.Items, func(m migrationv1alpha1.StorageVersionMigration) bool {
			return trigger.IsOwned(&m) && trigger.TargetHash(&m) == hash && framework.Failed(&m)
		}), nil
	})
}

// TestCheckUpgradeStorageVersionAPI runs a control plane that serves the
// StorageVersion API, checks svm's hashes against every built-in resource's
// reported encoding version, and then shows a rolling upgrade: while a
// second API server writes deployments in another version, no target is
// safe; once it is gone, the one that reads apps/v1 is.
func TestCheckUpgradeStorageVersionAPI(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{APIServerFlags: framework.StorageVersionAPIFlags})
	kubeconfig := env.KubeconfigFile(t)
	deploymentsSV := env.StorageVersion(t, "apps.deployments")
	if len(deploymentsSV.Status.StorageVersions) != 1 {
		t.Fatalf("deployments' StorageVersion lists %d API servers, want this one", len(deploymentsSV.Status.StorageVersions))
	}
	self := deploymentsSV.Status.StorageVersions[0]

	t.Run("hashes match discovery", func(t *testing.T) { expectHashesMatchDiscovery(t, env) })

	crds := env.InstallCRDs(t, framework.CRDBasesDir())
	replicas := int32(0)
	_, err := env.Kube.AppsV1().Deployments("default").Create(framework.Context(t, time.Minute), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "pause"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deployV1 := resources.StorageVersionHash("apps", "v1", "Deployment")
	crdV1beta1 := resources.StorageVersionHash("apiextensions.k8s.io", "v1beta1", "CustomResourceDefinition")
	svm := env.StartSVM(t, controllerArgs...)
	env.WaitStorageState(t, schema.GroupResource{Group: "apps", Resource: "deployments"}, 3*time.Minute, "deployments migrated", persisted(deployV1))
	env.WaitStorageState(t, schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}, 3*time.Minute, "CRDs migrated", persisted(crdV1beta1))
	if !svm.Stop(time.Minute) {
		t.Fatal("svm did not stop within a minute")
	}
	all := []upgrade.Source{upgrade.SourceDiscovery, upgrade.SourceStorageState, upgrade.SourceStorageVersionAPI}

	t.Run("servers agree", func(t *testing.T) {
		r := checkUpgrade(t, kubeconfig, 0, "--decodable", "deployments.apps=v1")
		res := only(t, r)
		expectResource(t, res, upgrade.VerdictSafe, map[string][]upgrade.Source{"apps/v1": all})
		if !r.StorageVersionAPIServed || res.ServersDisagree || len(res.APIServers) != 1 || res.APIServers[0].EncodingVersion != "apps/v1" {
			t.Errorf("StorageVersion API served %v, servers %+v (disagree %v); want this server alone, encoding apps/v1",
				r.StorageVersionAPIServed, res.APIServers, res.ServersDisagree)
		}
		env.ExpectStored(t, "/registry/deployments/", map[string]int{"apps/v1": 1})
	})

	// kube-apiserver v1.37 stores CRDs as apiextensions.k8s.io/v1beta1,
	// which it no longer serves; svm finds that version from the hash, and
	// the StorageVersion API confirms it.
	t.Run("stored in a version that is not served", func(t *testing.T) {
		r := checkUpgrade(t, kubeconfig, cli.ExitUnsafe, "--decodable", "customresourcedefinitions.apiextensions.k8s.io=v1")
		expectResource(t, only(t, r), upgrade.VerdictUnsafe, map[string][]upgrade.Source{"apiextensions.k8s.io/v1beta1": all}, "apiextensions.k8s.io/v1beta1")
		r = checkUpgrade(t, kubeconfig, 0, "--decodable", "customresourcedefinitions.apiextensions.k8s.io=v1,v1beta1")
		expectResource(t, only(t, r), upgrade.VerdictSafe, map[string][]upgrade.Source{"apiextensions.k8s.io/v1beta1": all})
		env.ExpectStored(t, "/registry/apiextensions.k8s.io/customresourcedefinitions/", map[string]int{"apiextensions.k8s.io/v1beta1": len(crds)})
	})

	// A second API server, of a release that stores deployments as
	// apps/v1beta2, reports in: the servers now disagree.
	older := apiserverinternalServer("apps/v1beta2", "apps/v1beta2", "apps/v1", "apps/v1beta1")
	env.ReportStorageVersion(t, "apps.deployments", "apiserver-older", &older)
	t.Run("rolling upgrade", func(t *testing.T) {
		r := checkUpgrade(t, kubeconfig, cli.ExitUnsafe, "--decodable", "deployments.apps=v1")
		res := only(t, r)
		expectResource(t, res, upgrade.VerdictUnsafe, map[string][]upgrade.Source{
			"apps/v1beta2": {upgrade.SourceStorageVersionAPI},
			"apps/v1":      all,
		}, "apps/v1beta2")
		if !res.ServersDisagree || len(res.APIServers) != 2 {
			t.Errorf("servers %+v, disagree %v; want two that disagree", res.APIServers, res.ServersDisagree)
		}
		// Even a target that reads both versions must wait for the end of
		// the rollout.
		r = checkUpgrade(t, kubeconfig, cli.ExitUnsafe, "--decodable", "deployments.apps=v1,v1beta2")
		res = only(t, r)
		if res.Verdict != upgrade.VerdictUnsafe || !res.ServersDisagree || len(res.NotDecodable) != 0 {
			t.Errorf("verdict %s, disagree %v, not decodable %v; want unsafe for the disagreement alone", res.Verdict, res.ServersDisagree, res.NotDecodable)
		}
		want := "API servers write different versions (v1beta2 by apiserver-older; v1 by " + self.APIServerID + ")"
		if len(res.Reasons) == 0 || !strings.HasPrefix(res.Reasons[0], want) {
			t.Errorf("reasons %q, want the first to start %q", res.Reasons, want)
		}
	})

	// The older server is gone and its entry removed: the servers agree
	// again.
	env.ReportStorageVersion(t, "apps.deployments", "apiserver-older", nil)
	r := checkUpgrade(t, kubeconfig, 0, "--decodable", "deployments.apps=v1")
	expectResource(t, only(t, r), upgrade.VerdictSafe, map[string][]upgrade.Source{"apps/v1": all})
}

func apiserverinternalServer(encoding string, decodable ...string) apiserverinternalv1alpha1.ServerStorageVersion {
	return apiserverinternalv1alpha1.ServerStorageVersion{EncodingVersion: encoding, DecodableVersions: decodable, ServedVersions: []string{encoding}}
}

// expectHashesMatchDiscovery computes, for every resource the API server
// publishes a StorageVersion for, svm's hash of the version it encodes in,
// and compares it with the hash discovery reports.
func expectHashesMatchDiscovery(t *testing.T, env *framework.Env) {
	t.Helper()
	clients, err := kubeclients.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	disc := clients.Discovery
	_, lists, err := disc.ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	type served struct{ kind, hash string }
	byResource := map[string]served{}
	for _, list := range lists {
		group, _, _ := strings.Cut(list.GroupVersion, "/")
		if !strings.Contains(list.GroupVersion, "/") {
			group = ""
		}
		for _, r := range list.APIResources {
			if !strings.Contains(r.Name, "/") && r.StorageVersionHash != "" {
				byResource[group+"."+r.Name] = served{r.Kind, r.StorageVersionHash}
			}
		}
	}
	svs, err := env.Kube.InternalV1alpha1().StorageVersions().List(framework.Context(t, time.Minute), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	var buf bytes.Buffer
	for _, sv := range svs.Items {
		gr, ok := upgrade.StorageVersionResource(sv.Name)
		if !ok || sv.Status.CommonEncodingVersion == nil {
			t.Errorf("StorageVersion %s: name not understood or no common encoding version", sv.Name)
			continue
		}
		d, ok := byResource[gr.Group+"."+gr.Resource]
		if !ok {
			continue
		}
		group, version, found := strings.Cut(*sv.Status.CommonEncodingVersion, "/")
		if !found {
			group, version = "", group
		}
		if got := resources.StorageVersionHash(group, version, d.kind); got != d.hash {
			t.Errorf("%s stored as %s: svm computes %s, discovery reports %s", sv.Name, *sv.Status.CommonEncodingVersion, got, d.hash)
		}
		checked++
		buf.WriteString(sv.Name + "=" + *sv.Status.CommonEncodingVersion + " ")
	}
	// v1.37 publishes a StorageVersion for some 60 built-in resources.
	if checked < 40 {
		t.Errorf("only %d resources checked: %s", checked, buf.String())
	}
	t.Logf("%d hashes match discovery", checked)
}
