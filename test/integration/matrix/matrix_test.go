// Package matrix_test runs svm's main paths on a release of every
// supported Kubernetes minor (framework.SupportedMinors, built by make
// matrix): its CRDs install; svm migrate rewrites a custom resource after a
// storage flip and Secrets after a key rotation; svm controller notices a
// flip and a rotation by itself, migrates, re-encrypts and prunes
// storedVersions; svm status and svm check-upgrade answer. Every outcome
// is read from etcd. README's support table says what these tests show.
package matrix_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apiextensionshelpers "k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/status"
	"github.com/svm-project/svm/internal/upgrade"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

var namespaces = []string{"team-a", "team-b"}

// n objects of each kind: enough for several chunks at the chunk size
// below, few enough that four minors run side by side.
const n = 60

// TestEveryMinor runs the same story on each supported minor, side by
// side, each on a control plane of its own.
func TestEveryMinor(t *testing.T) {
	for _, minor := range framework.SupportedMinors {
		t.Run(minor, func(t *testing.T) {
			t.Parallel()
			storyOn(t, minor)
		})
	}
}

func storyOn(t *testing.T, minor string) {
	path := t.TempDir() + "/encryption.yaml"
	key1, key2, key3 := framework.NewEncryptionKey(t, "key1"), framework.NewEncryptionKey(t, "key2"), framework.NewEncryptionKey(t, "key3")
	framework.WriteEncryptionConfigFile(t, path, key1)
	env := framework.Start(t, controlplane.Options{
		Release:        minor,
		APIServerFlags: append(framework.AutomaticReloadFlags(path), framework.StorageVersionAPIFlags...),
	})
	if got := env.ServerMinor(t); got != minor {
		t.Fatalf("the API server reports Kubernetes %s, want %s", got, minor)
	}
	t.Logf("Kubernetes %s", env.CP.Release())
	env.InstallCRDs(t, framework.CRDBasesDir())
	env.CreateSecrets(t, namespaces, n)
	env.CreateWidgetCRD(t, "v1")
	env.CreateWidgets(t, "v1", namespaces, n)
	widgetsBefore := env.TakeSnapshot(t, framework.Widgets)
	secretsBefore := env.TakeSnapshot(t, framework.Secrets)
	kubeconfig := env.KubeconfigFile(t)
	widgets := framework.EtcdPrefix(framework.Widgets.GroupResource())

	// svm migrate after a CRD storage flip.
	env.SetStorage(t, framework.WidgetResource, "v2")
	svm(t, kubeconfig, 0, "migrate", "widgets.example.com", "--chunk-size", "25")
	env.ExpectStored(t, widgets, map[string]int{"example.com/v2": n})

	// svm migrate after a key rotation.
	framework.WaitEncryptionConfig(t, env.Config, framework.WriteEncryptionConfigFile(t, path, key2, key1))
	svm(t, kubeconfig, 0, "migrate", "secrets", "--chunk-size", "25")
	expectSecrets(t, env, "key2")

	// svm controller: its first-sight round, then a storage flip and a
	// key rotation it notices by itself.
	controller := env.StartSVM(t, framework.ControllerArgs("--trigger-interval", "5s", "--encryption-check-interval", "3s", "--encrypted-resources", "secrets")...)
	env.WaitMigrationsFinished(t, 5*time.Minute)
	env.SetStorage(t, framework.WidgetResource, "v1")
	framework.Eventually(t, "storedVersions pruned to [v1]", 3*time.Minute, func(context.Context) (bool, error) {
		return slices.Equal(env.CRDStoredVersions(t, framework.WidgetsCRDName), []string{"v1"}), nil
	})
	env.ExpectStored(t, widgets, map[string]int{"example.com/v1": n})
	config3 := framework.WriteEncryptionConfigFile(t, path, key3, key2)
	framework.WaitEncryptionConfig(t, env.Config, config3)
	env.WaitStorageState(t, schema.GroupResource{Resource: "secrets"}, 3*time.Minute, "re-encrypted under "+config3, func(s *migrationv1alpha1.StorageState) bool {
		return s.Status.Encryption != nil && s.Status.Encryption.RewrittenConfigHash == config3
	})
	expectSecrets(t, env, "key3")
	env.WaitMigrationsFinished(t, 3*time.Minute)
	var failed []string
	for _, m := range env.Migrations(t) {
		if framework.Failed(&m) {
			failed = append(failed, m.Name+": "+framework.Condition(&m, migrationv1alpha1.MigrationFailed).Message)
		}
	}
	if len(failed) > 0 {
		t.Errorf("failed migrations on %s: %v", minor, failed)
	}

	// svm status and svm check-upgrade.
	out := svm(t, kubeconfig, 0, "status", "-o", "json")
	var report status.Report
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("svm status -o json: %v\n%s", err, out)
	}
	if report.Encryption == nil || report.Encryption.ConfigHash != config3 || !report.Encryption.AllRewritten {
		t.Errorf("svm status's encryption section %+v, want every resource rewritten under %s", report.Encryption, config3)
	}
	out = svm(t, kubeconfig, 0, "check-upgrade", "--decodable", "widgets.example.com=v1", "-o", "json")
	var check upgrade.Report
	if err := json.Unmarshal([]byte(out), &check); err != nil {
		t.Fatalf("svm check-upgrade -o json: %v\n%s", err, out)
	}
	if check.Verdict != upgrade.VerdictSafe {
		t.Errorf("check-upgrade says %s with etcd holding only v1 widgets:\n%s", check.Verdict, out)
	}
	// The same check with v1 unreadable is unsafe until v2 holds them all.
	svm(t, kubeconfig, 3, "check-upgrade", "--decodable", "widgets.example.com=v2")
	env.CheckRelease(t, kubeconfig, "1.39")

	// svm marked the CRD while it migrated, as kube-controller-manager
	// does, and cleared the mark when it succeeded (1.34's CRDs have no
	// observedGeneration in conditions: the mark goes without).
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(framework.Context(t, time.Minute), client.ObjectKey{Name: framework.WidgetsCRDName}, crd); err != nil {
		t.Fatal(err)
	}
	if c := apiextensionshelpers.FindCRDCondition(crd, apiextensionsv1.StorageMigrating); c == nil || c.Status != apiextensionsv1.ConditionFalse || c.Reason != "MigrationSucceeded" {
		t.Errorf("the CRD's StorageMigrating condition is %+v, want False with reason MigrationSucceeded", c)
	}
	// What 1.34 lacks is said once, in one line.
	said := strings.Count(string(controller.Log(t)), "CRD conditions have no observedGeneration")
	if want := map[bool]int{true: 1, false: 0}[minor == "1.34"]; said != want {
		t.Errorf("svm said %d times that CRD conditions have no observedGeneration on %s, want %d", said, minor, want)
	}

	env.ExpectUnchanged(t, framework.Widgets, widgetsBefore)
	env.ExpectUnchanged(t, framework.Secrets, secretsBefore)
}

// svm runs svm with args and fails the test unless it exits with code;
// it returns the standard output.
func svm(t *testing.T, kubeconfig string, code int, args ...string) string {
	t.Helper()
	got, stdout, stderr := framework.RunSVM(t, kubeconfig, 3*time.Minute, args...)
	if got != code {
		t.Fatalf("svm %v exited %d, want %d\n%s\n%s", args, got, code, stdout, stderr)
	}
	return stdout
}

// expectSecrets fails the test unless etcd holds every Secret encrypted
// with key.
func expectSecrets(t *testing.T, env *framework.Env, key string) {
	t.Helper()
	all := map[string]int{}
	for _, ns := range namespaces {
		for k, v := range env.StoredVersions(t, "/registry/secrets/"+ns+"/") {
			all[k] += v
		}
	}
	if diff := cmp.Diff(map[string]int{"encrypted:aescbc:" + key: n}, all); diff != "" {
		t.Errorf("Secrets in etcd (-want +got):\n%s", diff)
	}
}
