package framework

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/svm-project/svm/internal/etcdvalue"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/kmsplugin"
)

// KMSProvider is the name of the KMS v2 provider that StartWithKMS
// configures: what follows "k8s:enc:kms:v2:" in the values it writes.
const KMSProvider = "svm-test-kms"

// WriteKMSEncryptionConfig writes kmsplugin.EncryptionConfig for plugin, as
// provider KMSProvider, to dir and returns the kube-apiserver flag that
// uses it.
func WriteKMSEncryptionConfig(t testing.TB, dir string, plugin *kmsplugin.Plugin) string {
	t.Helper()
	path := filepath.Join(dir, "kms-encryption.yaml")
	if err := os.WriteFile(path, kmsplugin.EncryptionConfig(KMSProvider, plugin.Endpoint()), 0o600); err != nil {
		t.Fatal(err)
	}
	return "--encryption-provider-config=" + path
}

// StartWithKMS starts a KMS v2 plugin whose key ID is keyID, then a
// control plane of t's own (opts, with the flag of
// WriteKMSEncryptionConfig added) whose API server encrypts Secrets with
// it. The plugin listens before the API server starts, which needs it to
// become ready, and stops after the control plane.
func StartWithKMS(t testing.TB, opts controlplane.Options, keyID string) (*Env, *kmsplugin.Plugin) {
	t.Helper()
	plugin := kmsplugin.Start(t, keyID)
	flag := WriteKMSEncryptionConfig(t, t.TempDir(), plugin)
	opts.APIServerFlags = append(append([]string(nil), opts.APIServerFlags...), flag)
	return Start(t, opts), plugin
}

// StartPeerWithKMS starts a second API server on e's etcd
// (controlplane.StartPeer, under hostname name, with flags), as in a
// highly available control plane whose servers each call a KMS v2 plugin
// of their own: the EncryptionConfiguration of StartWithKMS, in a file of
// its own, served by a new instance of plugin's KMS whose current key ID
// is keyID and which answers this server alone. The peer stops when t
// ends, before the plugin.
//
// Both files name plugin's socket, so that the servers load the same
// configuration: its hash, which svm compares across the servers, is of
// the file's bytes, as on real nodes, where each server's plugin listens
// at the same path. The instance tells its server by the configuration
// file on its command line.
func (e *Env) StartPeerWithKMS(t testing.TB, plugin *kmsplugin.Plugin, name, keyID string, flags ...string) (*controlplane.Peer, *kmsplugin.Plugin) {
	t.Helper()
	flag := WriteKMSEncryptionConfig(t, t.TempDir(), plugin)
	own, err := plugin.Instance(keyID, func(c kmsplugin.Caller) bool { return slices.Contains(c.Args, flag) })
	if err != nil {
		t.Fatal(err)
	}
	peer, err := e.CP.StartPeer(Context(t, 3*time.Minute), name, append(slices.Clone(flags), flag)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = peer.Stop() })
	return peer, own
}

// KMSv2KeyID reads which provider and key ID sealed a raw etcd value that
// KMS v2 encrypted, with the reader svm etcd-scan uses
// (internal/etcdvalue). ok is false for a value KMS v2 did not encrypt.
func KMSv2KeyID(raw []byte) (provider, keyID string, ok bool, err error) {
	v, err := etcdvalue.Inspect(raw)
	switch {
	case err != nil && bytes.HasPrefix(raw, []byte("k8s:enc:kms:v2:")):
		return "", "", true, err
	case err != nil || v.Encryption == nil || v.Encryption.Provider != "kms" || v.Encryption.Version != "v2":
		return "", "", false, nil
	}
	return v.Encryption.Key, v.Encryption.KeyID, true, nil
}

// StoredKMSKeys reads every value under prefix and counts them by the KMS
// v2 provider and key ID that sealed them, "<provider>/<keyID>", or as
// "not KMS v2". It fails the test on a KMS v2 value it cannot read.
func (e *Env) StoredKMSKeys(t testing.TB, prefix string) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for key, raw := range e.RawValues(t, prefix) {
		counts[kmsLabel(t, key, raw)]++
	}
	return counts
}

// kmsLabel is what StoredKMSKeys counts the value raw of key as.
func kmsLabel(t testing.TB, key string, raw []byte) string {
	t.Helper()
	provider, keyID, ok, err := KMSv2KeyID(raw)
	switch {
	case err != nil:
		t.Fatalf("etcd value %s: %v", key, err)
	case !ok:
		return "not KMS v2"
	}
	return provider + "/" + keyID
}

// CheckKMSProviders asks the API server for its kms-providers health
// check (/readyz/kms-providers). A check whose last result is older than
// 20 seconds calls the plugins' Status at once, and a key ID that changed
// since then makes the API server write under the new one from that
// check on, rather than from its next poll, up to a minute later.
func (e *Env) CheckKMSProviders(ctx context.Context) error { return checkKMSProviders(ctx, e.Kube) }

// checkKMSProviders is CheckKMSProviders of the API server kube reaches.
func checkKMSProviders(ctx context.Context, kube kubernetes.Interface) error {
	body, err := kube.Discovery().RESTClient().Get().AbsPath("/readyz/kms-providers").DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("/readyz/kms-providers: %w: %s", err, strings.TrimSpace(string(body)))
	}
	return nil
}

// WaitKMSWritesUnder waits until a Secret newly written in namespace
// (created if missing) is stored under KMS v2 key ID keyID, and returns
// how long that took. Every second it asks the kms-providers check
// (CheckKMSProviders) and writes a new Secret, reads its value in etcd
// and deletes it, so that it leaves no Secret behind.
func (e *Env) WaitKMSWritesUnder(t testing.TB, namespace, keyID string, timeout time.Duration) time.Duration {
	t.Helper()
	return e.waitKMSWritesUnder(t, e.Kube, namespace, keyID, timeout)
}

// WaitKMSWritesThrough is WaitKMSWritesUnder through the API server cfg
// reaches, such as a peer (controlplane.Peer.RESTConfig), and through it
// alone: the check asked and the Secrets written are that server's. With
// a timeout of 0 it writes one Secret, which must be under keyID.
func (e *Env) WaitKMSWritesThrough(t testing.TB, cfg *rest.Config, namespace, keyID string, timeout time.Duration) time.Duration {
	t.Helper()
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e.waitKMSWritesUnder(t, kube, namespace, keyID, timeout)
}

// waitKMSWritesUnder is WaitKMSWritesUnder through kube.
func (e *Env) waitKMSWritesUnder(t testing.TB, kube kubernetes.Interface, namespace, keyID string, timeout time.Duration) time.Duration {
	t.Helper()
	e.CreateNamespace(t, namespace)
	start := time.Now()
	var last string
	for i := 0; ; i++ {
		if err := checkKMSProviders(Context(t, time.Minute), kube); err != nil {
			t.Logf("after %s: %v", time.Since(start).Round(time.Millisecond), err)
		}
		if last = e.probeKMSWrite(t, kube, namespace, i); last == keyID {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("new Secrets are still stored under KMS key ID %q after %s, want %q", last, timeout, keyID)
		}
		time.Sleep(time.Second)
	}
}

// probeKMSWrite creates Secret number i of WaitKMSWritesUnder in
// namespace through kube, and returns the key ID its etcd value is
// sealed under, deleting it.
func (e *Env) probeKMSWrite(t testing.TB, kube kubernetes.Interface, namespace string, i int) string {
	t.Helper()
	ctx := Context(t, time.Minute)
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("kms-probe-%d", i), Namespace: namespace}, Data: map[string][]byte{"probe": fmt.Append(nil, i)}}
	if _, err := kube.CoreV1().Secrets(namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatalf("write a Secret to see its KMS key: %v", err)
	}
	key := EtcdPrefix(Secrets.GroupResource()) + namespace + "/" + s.Name
	resp, err := e.Etcd.Get(ctx, key)
	if err != nil {
		t.Fatalf("read etcd %s: %v", key, err)
	}
	if len(resp.Kvs) != 1 {
		t.Fatalf("etcd holds %d values at %s, want 1", len(resp.Kvs), key)
	}
	_, keyID, ok, err := KMSv2KeyID(resp.Kvs[0].Value)
	if err != nil || !ok {
		t.Fatalf("etcd value %s is not KMS v2 encrypted (%v)", key, err)
	}
	if err := kube.CoreV1().Secrets(namespace).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete Secret %s/%s: %v", namespace, s.Name, err)
	}
	return keyID
}
