package encryption_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/rotation"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
	"github.com/svm-project/svm/test/kmsplugin"
)

// kmsMove is an operator's move of Secrets onto a KMS v2 provider by a
// reload of the encryption configuration: the provider goes first, and
// what stored the Secrets until then stays after it, to read them until
// they are rewritten.
type kmsMove struct {
	// from are the providers of the configuration the API server starts
	// with; fallback are those kept after the KMS v2 provider.
	from, fallback []framework.EncryptionProvider
	// storedBefore is how every Secret is stored under from, as
	// StoredEncryptions counts it.
	storedBefore string
	// gate are the arguments of svm etcd-scan that prove no Secret is left
	// stored as from stored it: it exits 3 before the move, 0 after.
	gate []string
}

// TestMoveFromAESCBCToKMS is the move from aescbc to KMS v2: the operator
// reloads a configuration whose first provider is KMS v2, with the aescbc
// key kept to read. svm notices the new configuration and the KMS key,
// re-encrypts every Secret by itself and records both, after which every
// Secret is sealed by the KMS provider in etcd, reads back as it was, and
// svm etcd-scan proves that none needs the aescbc key any more; nor does
// an API server restarted without it.
func TestMoveFromAESCBCToKMS(t *testing.T) {
	t.Parallel()
	key1 := framework.NewEncryptionKey(t, "key1")
	moveToKMS(t, kmsMove{
		from:         []framework.EncryptionProvider{framework.AESCBC(key1)},
		fallback:     []framework.EncryptionProvider{framework.AESCBC(key1)},
		storedBefore: "aescbc:v1:key1",
		gate:         []string{"--fail-on-key", "key1"},
	})
}

// TestMoveFromNoEncryptionToKMS turns encryption at rest on with KMS v2:
// the Secrets were stored unencrypted (the configuration has identity
// alone), and the reloaded one puts KMS v2 first with identity after it.
// svm re-encrypts them by itself, svm etcd-scan proves that none is left
// in plain text, and an API server restarted with the KMS provider alone
// reads them all.
func TestMoveFromNoEncryptionToKMS(t *testing.T) {
	t.Parallel()
	moveToKMS(t, kmsMove{
		from:         []framework.EncryptionProvider{framework.Identity},
		fallback:     []framework.EncryptionProvider{framework.Identity},
		storedBefore: "identity",
		gate:         []string{"--fail-on-identity"},
	})
}

// moveToKMS runs move with svm controller running: 300 Secrets stored
// under move.from, which svm records at first sight; then the reload onto
// KMS v2 key-1, with no migration created by anyone but svm; and at last
// the fallback dropped, after which every Secret still reads.
func moveToKMS(t *testing.T, move kmsMove) {
	const n = 300
	// The plugin starts before the control plane, so that it stops after.
	plugin := kmsplugin.Start(t, "key-1")
	path := t.TempDir() + "/encryption.yaml"
	from := framework.WriteEncryptionProvidersFile(t, path, move.from...)
	env := framework.Start(t, controlplane.Options{APIServerFlags: framework.AutomaticReloadFlags(path)})
	env.InstallCRDs(t, framework.CRDBasesDir())
	env.CreateSecrets(t, kmsNamespaces, n)
	before := env.TakeSnapshot(t, framework.Secrets)
	if diff := cmp.Diff(map[string]int{move.storedBefore: n}, storedByEncryption(t, env)); diff != "" {
		t.Fatalf("before the move (-want +got):\n%s", diff)
	}
	if code, out := scanSecrets(t, env, move.gate...); code != 3 {
		t.Fatalf("svm etcd-scan %s before the move exited %d, want 3:\n%s", strings.Join(move.gate, " "), code, out)
	}

	// The move ends with the API server restarted: svm, run here as a
	// process no Deployment restarts, must not exit when it cannot renew
	// a leader lease meanwhile (a restart under load outlasts the lease).
	env.StartSVM(t, controllerArgs("--leader-elect=false")...)
	if first := waitRewritten(t, env, from, 3*time.Minute); len(first.RewrittenKMSKeys) != 0 {
		t.Errorf("before the move svm recorded KMS v2 keys %+v, want none", first.RewrittenKMSKeys)
	}
	// The trigger migrates every resource at first sight, Secrets too:
	// let it end, so that only svm's re-encryption rewrites them below.
	env.WaitMigrationsFinished(t, 3*time.Minute)

	kms := framework.KMSv2(framework.KMSProvider, plugin.Endpoint())
	to := framework.WriteEncryptionProvidersFile(t, path, append([]framework.EncryptionProvider{kms}, move.fallback...)...)
	framework.WaitEncryptionConfig(t, env.Config, to)
	loaded := time.Now()
	e := waitRewrittenUnderMove(t, env, to, "key-1", 3*time.Minute)
	t.Logf("svm recorded the Secrets rewritten under %s and KMS v2 key-1 %s after the API server had loaded it", to, time.Since(loaded).Round(time.Second))
	m := expectMovedBySVM(t, env, e, to, "key-1")
	// Seen within the check interval, give or take the poll of this test
	// and the API server's second-granular timestamps: the KMS key needs
	// no look of its own.
	if took := m.CreationTimestamp.Sub(loaded); took > checkInterval+5*time.Second {
		t.Errorf("the re-encryption was created %s after the API server had loaded the new configuration, want within the check interval (%s)", took, checkInterval)
	}

	kmsLabel := "kms:v2:" + framework.KMSProvider + ":key-1"
	if diff := cmp.Diff(map[string]int{kmsLabel: n}, storedByEncryption(t, env)); diff != "" {
		t.Errorf("after the move (-want +got):\n%s", diff)
	}
	env.ExpectUnchanged(t, framework.Secrets, before)
	expectSecretData(t, env, n)
	if s := svmStatus(t, env); !s.AllRewritten || s.ConfigHash != to || !cmp.Equal(s.KMSKeys, kmsKeys("key-1")) {
		t.Errorf("svm status after the move: allRewritten %v, configuration %s, KMS keys %+v, verdict %q; want true, %s, key-1", s.AllRewritten, s.ConfigHash, s.KMSKeys, s.Verdict, to)
	}
	if code, out := scanSecrets(t, env, move.gate...); code != 0 {
		t.Errorf("svm etcd-scan %s after the move exited %d, want 0:\n%s", strings.Join(move.gate, " "), code, out)
	}
	// The same scan sees the Secrets where they are now.
	if code, out := scanSecrets(t, env, "--fail-on-key", kmsLabel); code != 3 {
		t.Errorf("svm etcd-scan --fail-on-key %s after the move exited %d, want 3:\n%s", kmsLabel, code, out)
	}

	// The fallback goes, the move's last step, and the API server
	// restarts, so that it reads every Secret from etcd anew with the KMS
	// provider alone: a value still stored as before would not read.
	final := framework.WriteEncryptionProvidersFile(t, path, kms)
	if err := env.CP.RestartAPIServer(framework.Context(t, 3*time.Minute)); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	env.ExpectUnchanged(t, framework.Secrets, before)
	expectSecretData(t, env, n)
	// svm makes sure of that configuration too, once the restarted server
	// has called its plugin; every Secret stays where it is.
	waitRewrittenUnderMove(t, env, final, "key-1", 3*time.Minute)
	t.Logf("svm recorded the configuration without the fallback %s after the API server restarted", time.Since(restarted).Round(time.Second))
	if diff := cmp.Diff(map[string]int{kmsLabel: n}, storedByEncryption(t, env)); diff != "" {
		t.Errorf("after the fallback went (-want +got):\n%s", diff)
	}
}

// kmsKeys is keyID of the test's KMS v2 provider, as svm records it.
func kmsKeys(keyID string) []migrationv1alpha1.KMSKey {
	return []migrationv1alpha1.KMSKey{{Provider: framework.KMSProvider, KeyIDHash: keyIDHash(keyID)}}
}

// waitRewrittenUnderMove waits until the StorageState of Secrets records
// a completed re-encryption under the configuration config and the KMS
// v2 key keyID, and returns the record.
func waitRewrittenUnderMove(t *testing.T, env *framework.Env, config, keyID string, timeout time.Duration) *migrationv1alpha1.StorageEncryption {
	t.Helper()
	want := kmsKeys(keyID)
	s := env.WaitStorageState(t, secrets, timeout, "rewritten under "+config+" and KMS v2 key "+keyID, func(s *migrationv1alpha1.StorageState) bool {
		e := s.Status.Encryption
		return e != nil && e.RewrittenConfigHash == config && cmp.Equal(want, e.RewrittenKMSKeys)
	})
	return s.Status.Encryption
}

// expectMovedBySVM checks that the record e names the configuration and
// key every server has (config, keyID), and a re-encryption svm created
// by itself for them, which it returns.
func expectMovedBySVM(t *testing.T, env *framework.Env, e *migrationv1alpha1.StorageEncryption, config, keyID string) *migrationv1alpha1.StorageVersionMigration {
	t.Helper()
	if e.ConfigHash != config || !cmp.Equal(e.KMSKeys, kmsKeys(keyID)) {
		t.Errorf("the StorageState says the API servers have configuration %s and KMS keys %+v, want %s and %s", e.ConfigHash, e.KMSKeys, config, keyID)
	}
	var m migrationv1alpha1.StorageVersionMigration
	if err := env.Client.Get(framework.Context(t, time.Minute), client.ObjectKey{Name: e.RewrittenBy}, &m); err != nil {
		t.Fatal(err)
	}
	if m.Labels[rotation.CreatedByLabel] != rotation.CreatedByValue {
		t.Errorf("the re-encryption recorded, %s, is labelled %v: not one svm made", m.Name, m.Labels)
	}
	if got, want := m.Annotations[rotation.KMSKeysAnnotation], framework.KMSProvider+"="+keyIDHash(keyID); got != want {
		t.Errorf("migration %s is annotated %s=%q, want %q", m.Name, rotation.KMSKeysAnnotation, got, want)
	}
	// The server called the plugin before it took the configuration up,
	// so svm sees both at once: never the configuration without the key,
	// which would take a pass more.
	if ms := reencryptions(t, env, config); len(ms) != 1 {
		for _, r := range ms {
			t.Logf("re-encryption %s under %s: KMS keys %q, created %s", r.Name, config, r.Annotations[rotation.KMSKeysAnnotation], r.CreationTimestamp.Format(time.RFC3339))
		}
		t.Errorf("%d re-encryptions under %s, want the one", len(ms), config)
	}
	return &m
}

// storedByEncryption counts the raw etcd values of the Secrets in
// kmsNamespaces as StoredEncryptions does.
func storedByEncryption(t *testing.T, env *framework.Env) map[string]int {
	t.Helper()
	all := map[string]int{}
	for _, ns := range kmsNamespaces {
		for k, v := range env.StoredEncryptions(t, "/registry/secrets/"+ns+"/") {
			all[k] += v
		}
	}
	return all
}

// scanSecrets runs svm etcd-scan over every Secret with args, and returns
// its exit code and what it printed.
func scanSecrets(t *testing.T, env *framework.Env, args ...string) (int, string) {
	t.Helper()
	code, stdout, stderr := framework.RunSVM(t, env.KubeconfigFile(t), time.Minute, append([]string{"etcd-scan", "--endpoints", env.CP.EtcdURL, "--resource", "secrets"}, args...)...)
	return code, stdout + stderr
}
