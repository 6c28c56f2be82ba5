package encryption_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
