package encryption_test

import (
	"crypto/sha256"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/cli"
	"github.com/svm-project/svm/internal/rotation"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

var kmsNamespaces = []string{"kms-a", "kms-b"}

// storedUnderKMS counts the raw etcd values of the Secrets in
// kmsNamespaces by the KMS v2 provider and key ID that sealed them.
func storedUnderKMS(t *testing.T, env *framework.Env) map[string]int {
	t.Helper()
	all := map[string]int{}
	for _, ns := range kmsNamespaces {
		for k, v := range env.StoredKMSKeys(t, "/registry/secrets/"+ns+"/") {
			all[k] += v
		}
	}
	return all
}

// TestKMSv2PluginRotation is a KMS v2 key rotation as an operator's KMS
// does it, with svm run by hand: the plugin switches from key-1 to key-2,
// the API server writes new Secrets under key-2 from its next Status
// call on, while those written before stay under key-1 in etcd until
// `svm migrate secrets` rewrites them, after which every one is under
// key-2 and reads back as it was. The API server is restarted before the
// migration, so that reading them takes the plugin's decrypting under
// key-1, as a real KMS keeps its old key versions.
func TestKMSv2PluginRotation(t *testing.T) {
	t.Parallel()
	const n = 50
	env, plugin := framework.StartWithKMS(t, controlplane.Options{}, "key-1")
	env.CreateSecrets(t, kmsNamespaces, n)
	before := env.TakeSnapshot(t, framework.Secrets)
	under := func(keyID string) map[string]int { return map[string]int{framework.KMSProvider + "/" + keyID: n} }
	if diff := cmp.Diff(under("key-1"), storedUnderKMS(t, env)); diff != "" {
		t.Fatalf("before the rotation (-want +got):\n%s", diff)
	}
	env.WaitKMSWritesUnder(t, "kms-probe", "key-1", time.Minute)

	if err := plugin.Rotate("key-2"); err != nil {
		t.Fatal(err)
	}
	statusCalls := plugin.Calls("Status")
	took := env.WaitKMSWritesUnder(t, "kms-probe", "key-2", 3*time.Minute)
	t.Logf("new Secrets were written under key-2 %s after the plugin rotated (%d Status calls in between)", took.Round(time.Millisecond), plugin.Calls("Status")-statusCalls)
	if diff := cmp.Diff(under("key-1"), storedUnderKMS(t, env)); diff != "" {
		t.Fatalf("after the rotation, before svm migrate, the Secrets written before it (-want +got):\n%s", diff)
	}

	// A restart empties the API server's cache of the data keys it made
	// itself: to read the Secrets written before the rotation, it must
	// now ask the plugin to decrypt under key-1, which is no longer the
	// plugin's current key.
	decrypts := plugin.Calls("Decrypt")
	if err := env.CP.RestartAPIServer(framework.Context(t, 3*time.Minute)); err != nil {
		t.Fatal(err)
	}

	code, stdout, stderr := framework.RunSVM(t, env.KubeconfigFile(t), 3*time.Minute, "migrate", "secrets")
	if code != 0 {
		t.Fatalf("svm migrate secrets exited %d:\n%s\n%s", code, stdout, stderr)
	}
	if diff := cmp.Diff(under("key-2"), storedUnderKMS(t, env)); diff != "" {
		t.Errorf("after svm migrate secrets (-want +got):\n%s", diff)
	}
	env.ExpectUnchanged(t, framework.Secrets, before)
	expectSecretData(t, env, n)
	if plugin.Calls("Decrypt") == decrypts {
		t.Error("the restarted API server read the Secrets under key-1 without asking the plugin to decrypt")
	}
	t.Logf("the plugin answered %d Status, %d Encrypt and %d Decrypt calls", plugin.Calls("Status"), plugin.Calls("Encrypt"), plugin.Calls("Decrypt"))
}

// expectSecretData reads every Secret of kmsNamespaces back through the
// API server and checks that it holds what CreateSecrets wrote, n in all.
func expectSecretData(t *testing.T, env *framework.Env, n int) {
	t.Helper()
	seen := 0
	for _, ns := range kmsNamespaces {
		list, err := env.Kube.CoreV1().Secrets(ns).List(framework.Context(t, time.Minute), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range list.Items {
			seen++
			i, err := strconv.Atoi(s.Labels["index"])
			if err != nil {
				t.Fatalf("Secret %s/%s has no index label: %v", ns, s.Name, err)
			}
			if diff := cmp.Diff(framework.SecretData(i), s.Data); diff != "" {
				t.Errorf("Secret %s/%s reads back changed (-want +got):\n%s", ns, s.Name, diff)
			}
		}
	}
	if seen != n {
		t.Errorf("read %d Secrets back, want %d", seen, n)
	}
}

// keyIDHash is how kube-apiserver's metrics, and svm after them, name a
// KMS v2 key ID.
func keyIDHash(keyID string) string {
	return fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(keyID)))
}

// waitRewrittenUnderKMS waits until the StorageState of Secrets records a
// completed re-encryption under the KMS v2 key keyID of the test's
// provider, and returns the record.
func waitRewrittenUnderKMS(t *testing.T, env *framework.Env, keyID string, timeout time.Duration) *migrationv1alpha1.StorageEncryption {
	t.Helper()
	want := []migrationv1alpha1.KMSKey{{Provider: framework.KMSProvider, KeyIDHash: keyIDHash(keyID)}}
	s := env.WaitStorageState(t, secrets, timeout, "rewritten under KMS v2 key "+keyID, func(s *migrationv1alpha1.StorageState) bool {
		return s.Status.Encryption != nil && cmp.Equal(want, s.Status.Encryption.RewrittenKMSKeys)
	})
	return s.Status.Encryption
}

// TestControllerReencryptsAfterKMSKeyRotation is a KMS v2 key rotation
// with svm controller running at its defaults (a look at the API servers
// a minute): the plugin switches from key-1 to key-2, which changes no
// configuration, and nobody writes or creates a migration after. The API
// server learns the key at its next Status call, up to a minute later;
// svm sees that from its envelope encryption metrics and its
// kms-providers check, re-encrypts every Secret by itself and records
// the key, all within 5 minutes of the rotation, after which every one of
// the 1,000 Secrets is under key-2 in etcd, reads back as it was, svm
// status says the other keys are no longer needed, and svm etcd-scan's
// gate on key-1, which failed before, passes.
func TestControllerReencryptsAfterKMSKeyRotation(t *testing.T) {
	t.Parallel()
	const n = 1000
	env, plugin := framework.StartWithKMS(t, controlplane.Options{}, "key-1")
	env.InstallCRDs(t, framework.CRDBasesDir())
	env.CreateSecrets(t, kmsNamespaces, n)
	before := env.TakeSnapshot(t, framework.Secrets)
	under := func(keyID string) map[string]int { return map[string]int{framework.KMSProvider + "/" + keyID: n} }
	kubeconfig := env.KubeconfigFile(t)

	env.StartSVM(t, framework.ControllerArgs()...)
	// At first sight svm records the key the server writes under.
	first := waitRewrittenUnderKMS(t, env, "key-1", 3*time.Minute)
	env.WaitMigrationsFinished(t, 3*time.Minute)
	if code, stdout, stderr := failOnKey(t, env, kubeconfig, "key-1"); code != cli.ExitUnsafe ||
		!strings.Contains(stderr, fmt.Sprintf("%d values are still encrypted under key key-1", n)) {
		t.Errorf("svm etcd-scan --fail-on-key key-1 before the rotation: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, cli.ExitUnsafe, stdout, stderr)
	}

	if err := plugin.Rotate("key-2"); err != nil {
		t.Fatal(err)
	}
	rotated := time.Now()
	e := waitRewrittenUnderKMS(t, env, "key-2", 5*time.Minute)
	took := time.Since(rotated)
	t.Logf("svm recorded the Secrets rewritten under key-2 %s after the plugin rotated (%d Status calls in all)", took.Round(time.Second), plugin.Calls("Status"))
	if e.RewrittenConfigHash != first.RewrittenConfigHash || e.RewrittenBy == first.RewrittenBy {
		t.Errorf("recorded %+v, want the configuration of the first record (%s), by a new migration", e, first.RewrittenConfigHash)
	}
	var m migrationv1alpha1.StorageVersionMigration
	if err := env.Client.Get(framework.Context(t, time.Minute), client.ObjectKey{Name: e.RewrittenBy}, &m); err != nil {
		t.Fatal(err)
	}
	if got, want := m.Annotations[rotation.KMSKeysAnnotation], framework.KMSProvider+"="+keyIDHash("key-2"); got != want {
		t.Errorf("migration %s is annotated %s=%q, want %q", m.Name, rotation.KMSKeysAnnotation, got, want)
	}
	if !m.CreationTimestamp.After(rotated.Add(-time.Second)) {
		t.Errorf("migration %s was created at %s, before the rotation at %s", m.Name, m.CreationTimestamp, rotated)
	}
	if diff := cmp.Diff(under("key-2"), storedUnderKMS(t, env)); diff != "" {
		t.Errorf("after the re-encryption (-want +got):\n%s", diff)
	}
	if code, stdout, stderr := failOnKey(t, env, kubeconfig, "key-1"); code != 0 || stderr != "" {
		t.Errorf("svm etcd-scan --fail-on-key key-1 after the re-encryption: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	env.ExpectUnchanged(t, framework.Secrets, before)
	expectSecretData(t, env, n)
	if s := svmStatus(t, env); !s.AllRewritten || len(s.KMSKeys) != 1 || s.KMSKeys[0].KeyIDHash != keyIDHash("key-2") {
		t.Errorf("svm status after the re-encryption: allRewritten %v, KMS keys %+v, verdict %q; want true, key-2", s.AllRewritten, s.KMSKeys, s.Verdict)
	}
}

// failOnKey runs svm etcd-scan's gate on Secrets under key, as its own
// process, for its exit code.
func failOnKey(t *testing.T, env *framework.Env, kubeconfig, key string) (int, string, string) {
	t.Helper()
	return framework.RunSVM(t, kubeconfig, time.Minute, "etcd-scan", "--endpoints", env.CP.EtcdURL, "--resource", "secrets", "--fail-on-key", key)
}
