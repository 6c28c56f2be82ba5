// Package encryption_test shows that svm controller notices an
// encryption-at-rest key rotation by itself, re-encrypts the resources it
// is given once every API server has loaded the new configuration (and
// not before), resumes after a crash, and records, where svm status and
// its metrics show it, when the old key is no longer needed. Every test
// runs its own control plane, with automatic reload of the encryption
// configuration, and reads etcd to check.
package encryption_test

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/rotation"
	"github.com/svm-project/svm/internal/status"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

func TestMain(m *testing.M) {
	// The second API server runs under a hostname of its own: see
	// controlplane.StartPeer.
	controlplane.RunHostnameHelper()
	os.Exit(m.Run())
}

// checkInterval is svm's --encryption-check-interval in these tests.
const checkInterval = 3 * time.Second

var (
	namespaces = []string{"team-a", "team-b", "team-c"}
	secrets    = framework.Secrets.GroupResource()
)

// controllerArgs runs svm controller with re-encryption of Secrets.
func controllerArgs(extra ...string) []string {
	return framework.ControllerArgs(append([]string{
		"--trigger-interval", "10s", "--encryption-check-interval", checkInterval.String(), "--encrypted-resources", "secrets",
	}, extra...)...)
}

// waitRewritten waits until the StorageState of Secrets records a
// completed re-encryption under config, and returns the record.
func waitRewritten(t *testing.T, env *framework.Env, config string, timeout time.Duration) *migrationv1alpha1.StorageEncryption {
	t.Helper()
	s := env.WaitStorageState(t, secrets, timeout, "rewritten under "+config, func(s *migrationv1alpha1.StorageState) bool {
		return s.Status.Encryption != nil && s.Status.Encryption.RewrittenConfigHash == config
	})
	return s.Status.Encryption
}

// reencryptions are svm's re-encryption migrations under config.
func reencryptions(t *testing.T, env *framework.Env, config string) []migrationv1alpha1.StorageVersionMigration {
	t.Helper()
	var list migrationv1alpha1.StorageVersionMigrationList
	if err := env.Client.List(framework.Context(t, time.Minute), &list, client.MatchingLabels{rotation.CreatedByLabel: rotation.CreatedByValue}); err != nil {
		t.Fatal(err)
	}
	var out []migrationv1alpha1.StorageVersionMigration
	for _, m := range list.Items {
		if m.Annotations[rotation.ConfigHashAnnotation] == config {
			out = append(out, m)
		}
	}
	return out
}

// storedSecrets counts the raw etcd values of every Secret in the test's
// namespaces by what wraps them ("encrypted:aescbc:<key>").
func storedSecrets(t *testing.T, env *framework.Env) map[string]int {
	t.Helper()
	all := map[string]int{}
	for _, ns := range namespaces {
		for k, v := range env.StoredVersions(t, "/registry/secrets/"+ns+"/") {
			all[k] += v
		}
	}
	return all
}

// svmStatus runs `svm status -o json` with args and returns its
// encryption section, failing the test when there is none.
func svmStatus(t *testing.T, env *framework.Env, args ...string) *status.Encryption {
	t.Helper()
	code, stdout, stderr := framework.RunSVM(t, env.KubeconfigFile(t), time.Minute, append([]string{"status", "-o", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("svm status exited %d:\n%s\n%s", code, stdout, stderr)
	}
	var r status.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("svm status -o json: %v\n%s", err, stdout)
	}
	if r.Encryption == nil {
		t.Fatalf("svm status shows no encryption at rest:\n%s", stdout)
	}
	return r.Encryption
}

// TestReencryptsAfterKeyRotation is an operator's key rotation with svm
// controller running: key2 is put first in the configuration, the API
// server reloads it, and svm re-encrypts every Secret by itself, within
// its check interval, surviving a crash in the middle. The recorded
// configuration survives restarts (no second re-encryption), svm's metric
// says the old key is no longer needed, and once key1 is dropped every
// Secret still reads back as it was.
func TestReencryptsAfterKeyRotation(t *testing.T) {
	t.Parallel()
	const n = 1500
	path := t.TempDir() + "/encryption.yaml"
	key1, key2 := framework.NewEncryptionKey(t, "key1"), framework.NewEncryptionKey(t, "key2")
	config1 := framework.WriteEncryptionConfigFile(t, path, key1)
	env := framework.Start(t, controlplane.Options{APIServerFlags: framework.AutomaticReloadFlags(path)})
	env.InstallCRDs(t, framework.CRDBasesDir())
	env.CreateSecrets(t, namespaces, n)
	before := env.TakeSnapshot(t, framework.Secrets)
	if diff := cmp.Diff(map[string]int{"encrypted:aescbc:key1": n}, storedSecrets(t, env)); diff != "" {
		t.Fatalf("before the rotation (-want +got):\n%s", diff)
	}

	metrics := framework.FreeAddress(t)
	// --qps keeps the re-encryption long enough to crash in the middle.
	args := controllerArgs("--qps", "100", "--metrics-bind-address", metrics)
	svm := env.StartSVM(t, args...)
	// At first sight svm cannot know what the Secrets are under: it
	// re-encrypts them under the configuration the server has.
	waitRewritten(t, env, config1, 3*time.Minute)
	// The trigger migrates every resource at first sight, Secrets too:
	// let it end, so that the re-encryption below is the one to rewrite
	// them.
	env.WaitMigrationsFinished(t, 3*time.Minute)

	// The rotation: key2 writes, key1 still reads.
	config2 := framework.WriteEncryptionConfigFile(t, path, key2, key1)
	framework.WaitEncryptionConfig(t, env.Config, config2)
	loaded := time.Now()
	var m migrationv1alpha1.StorageVersionMigration
	framework.Eventually(t, "a re-encryption under "+config2, time.Minute, func(context.Context) (bool, error) {
		ms := reencryptions(t, env, config2)
		if len(ms) > 0 {
			m = ms[0]
		}
		return len(ms) > 0, nil
	})
	// Seen within the check interval, give or take the poll of this test
	// and the API server's second-granular timestamps.
	if took := m.CreationTimestamp.Sub(loaded); took > checkInterval+5*time.Second {
		t.Errorf("the re-encryption was created %s after the API server had loaded the new configuration, want within the check interval (%s)", took, checkInterval)
	}

	// A crash in the middle; the next svm resumes and completes it.
	env.WaitMigration(t, m.Name, 2*time.Minute, "under way", func(got *migrationv1alpha1.StorageVersionMigration) bool {
		return got.Status.Progress.Restored >= 200
	})
	svm.Kill()
	if stored := storedSecrets(t, env); stored["encrypted:aescbc:key1"] == 0 {
		t.Fatalf("the crash came too late to show a resume: %v", stored)
	}
	svm = env.StartSVM(t, args...)
	e := waitRewritten(t, env, config2, 3*time.Minute)
	if e.RewrittenBy != m.Name {
		t.Errorf("recorded migration %q, want %q, the one resumed", e.RewrittenBy, m.Name)
	}
	if diff := cmp.Diff(map[string]int{"encrypted:aescbc:key2": n}, storedSecrets(t, env)); diff != "" {
		t.Errorf("after the re-encryption (-want +got):\n%s", diff)
	}
	if e := svmStatus(t, env); !e.AllRewritten || e.ConfigHash != config2 ||
		!strings.Contains(e.Verdict, "no object written through the API needs a key that configuration only reads with") {
		t.Errorf("svm status after the re-encryption: allRewritten %v, configuration %s, verdict %q; want true, %s, old keys no longer needed",
			e.AllRewritten, e.ConfigHash, e.Verdict, config2)
	}
	framework.Eventually(t, "svm's metric says Secrets are rewritten", time.Minute, func(context.Context) (bool, error) {
		return framework.Scrape(t, metrics).Value("storage_migrator_encryption_resource_rewritten", "resource", "secrets") == 1 &&
			framework.Scrape(t, metrics).Value("storage_migrator_encryption_config_agreed") == 1, nil
	})

	// The record survives a restart: the next svm does not redo it.
	svm.Kill()
	env.StartSVM(t, args...)
	time.Sleep(4 * checkInterval)
	if ms := reencryptions(t, env, config2); len(ms) != 1 {
		t.Errorf("%d re-encryptions under %s after a restart, want the one", len(ms), config2)
	}
	if s := env.WaitStorageState(t, secrets, time.Minute, "read", func(*migrationv1alpha1.StorageState) bool { return true }); s.Status.Encryption.RewrittenConfigHash != config2 {
		t.Errorf("after a restart the state records %+v, want %s", s.Status.Encryption, config2)
	}

	// key1 goes; the configuration changes again, and svm makes sure of
	// it once more. Every Secret reads back as it was.
	config3 := framework.WriteEncryptionConfigFile(t, path, key2)
	framework.WaitEncryptionConfig(t, env.Config, config3)
	waitRewritten(t, env, config3, 3*time.Minute)
	if diff := cmp.Diff(map[string]int{"encrypted:aescbc:key2": n}, storedSecrets(t, env)); diff != "" {
		t.Errorf("after dropping key1 (-want +got):\n%s", diff)
	}
	env.ExpectUnchanged(t, framework.Secrets, before)
}

// TestRotationWaitsForEveryAPIServer: two API servers, each with its own
// copy of the configuration file. The rotation reaches one: svm starts
// nothing and says it waits; it reaches the other: svm re-encrypts.
func TestRotationWaitsForEveryAPIServer(t *testing.T) {
	t.Parallel()
	const n = 300
	dir := t.TempDir()
	pathA, pathB := dir+"/a.yaml", dir+"/b.yaml"
	key1, key2 := framework.NewEncryptionKey(t, "key1"), framework.NewEncryptionKey(t, "key2")
	config1 := framework.WriteEncryptionConfigFile(t, pathA, key1)
	framework.WriteEncryptionConfigFile(t, pathB, key1)
	env := framework.Start(t, controlplane.Options{APIServerFlags: framework.AutomaticReloadFlags(pathA)})
	peer, err := env.CP.StartPeer(framework.Context(t, 3*time.Minute), "apiserver-b", framework.AutomaticReloadFlags(pathB)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = peer.Stop() })
	env.InstallCRDs(t, framework.CRDBasesDir())
	env.CreateSecrets(t, namespaces, n)

	env.StartSVM(t, controllerArgs("--apiserver-endpoints", env.CP.APIServerURL+","+peer.URL)...)
	waitRewritten(t, env, config1, 3*time.Minute)

	// One server reloads.
	config2 := framework.WriteEncryptionConfigFile(t, pathA, key2, key1)
	framework.WaitEncryptionConfig(t, env.Config, config2)
	env.WaitStorageState(t, secrets, time.Minute, "waiting for the other API server", func(s *migrationv1alpha1.StorageState) bool {
		return s.Status.Encryption != nil && s.Status.Encryption.ConfigHash == "" &&
			strings.Contains(s.Status.Encryption.Message, "different encryption configurations")
	})
	endpoints := "--apiserver-endpoints=" + env.CP.APIServerURL + "," + peer.URL
	if e := svmStatus(t, env, endpoints); e.Agreed || e.AllRewritten || !strings.Contains(e.Verdict, "Re-encryption waits") {
		t.Errorf("svm status while one server reloaded: agreed %v, allRewritten %v, verdict %q; want a verdict saying it waits", e.Agreed, e.AllRewritten, e.Verdict)
	}
	time.Sleep(3 * checkInterval)
	if ms := reencryptions(t, env, config2); len(ms) != 0 {
		t.Fatalf("a re-encryption under %s started while only one of two API servers had loaded it: %s", config2, ms[0].Name)
	}
	if stored := storedSecrets(t, env); stored["encrypted:aescbc:key1"] != n {
		t.Errorf("while svm waits, stored %v: want all %d Secrets still under key1", stored, n)
	}

	// The other reloads the same file.
	if got := framework.WriteEncryptionConfigFile(t, pathB, key2, key1); got != config2 {
		t.Fatalf("the same configuration hashed %s and %s", config2, got)
	}
	framework.WaitEncryptionConfig(t, peer.RESTConfig(), config2)
	waitRewritten(t, env, config2, 3*time.Minute)
	if diff := cmp.Diff(map[string]int{"encrypted:aescbc:key2": n}, storedSecrets(t, env)); diff != "" {
		t.Errorf("after both reloaded (-want +got):\n%s", diff)
	}
	if e := svmStatus(t, env, endpoints); !e.AllRewritten || len(e.Servers) != 2 {
		t.Errorf("svm status after both reloaded: allRewritten %v, %d servers, verdict %q; want true and 2", e.AllRewritten, len(e.Servers), e.Verdict)
	}
}
