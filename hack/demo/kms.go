package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/etcdvalue"
	"github.com/svm-project/svm/internal/rotation"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/kmsplugin"
)

const (
	// kmsProvider is the KMS v2 provider's name in the demo's
	// EncryptionConfiguration.
	kmsProvider = "demo-kms"
	// secretsPrefix is where the API server stores the demo's Secrets.
	secretsPrefix = "/registry/secrets/" + namespace + "/"
	// kmsCheckInterval is svm's --encryption-check-interval in the demo
	// (the default is a minute): how often it looks at the API servers.
	kmsCheckInterval = 10 * time.Second
)

// runKMS is the KMS v2 demo: Secrets encrypted by a KMS v2 plugin, the
// KMS key rotated, and svm re-encrypting them by itself once the API
// server writes under the new key, proven from etcd's raw values, whose
// KMS v2 envelope names the key ID in the clear.
func runKMS(ctx context.Context, o options) error {
	d := &demo{o: o}
	d.step("starting a KMS v2 plugin whose key ID is key-1 (test support: its keys derive from their IDs)")
	plugin, stopPlugin, err := kmsplugin.Serve("key-1")
	if err != nil {
		return err
	}
	defer func() { _ = stopPlugin() }()
	d.step("starting a local control plane whose API server encrypts Secrets with it")
	cp, err := startKMSControlPlane(ctx, o, plugin)
	if err != nil {
		return err
	}
	defer cp.Stop()
	d.cp = cp
	if err := d.connect(); err != nil {
		return err
	}
	defer d.etcd.Close()
	d.say("API server %s, etcd %s; Secrets are encrypted by KMS v2 provider %s", cp.APIServerURL, cp.EtcdURL, kmsProvider)
	d.step("installing svm's CRDs (in a cluster: kubectl apply -k config/default)")
	if err := d.installCRDs(ctx); err != nil {
		return err
	}
	d.step(fmt.Sprintf("creating %d Secrets", o.Objects))
	if err := d.createSecrets(ctx); err != nil {
		return err
	}
	if _, err := d.reportKeys(ctx); err != nil {
		return err
	}
	before, err := d.secretData(ctx)
	if err != nil {
		return err
	}
	return d.rotateAndProve(ctx, plugin, before)
}

// rotateAndProve runs svm, rotates the plugin's key, watches svm
// re-encrypt and proves from etcd that no Secret needs key-1 any more.
func (d *demo) rotateAndProve(ctx context.Context, plugin *kmsplugin.Plugin, before map[string]map[string][]byte) error {
	d.step("starting svm controller")
	svm, err := d.startSVM(ctx, "--encryption-check-interval", kmsCheckInterval.String())
	if err != nil {
		return err
	}
	defer svm.stop()
	d.say("at first sight svm records the KMS v2 key every API server writes under")
	if err := d.waitRewrittenUnder(ctx, svm, "key-1"); err != nil {
		return err
	}

	d.step("rotating the key in the KMS: the plugin answers key ID key-2 from now on")
	if err := plugin.Rotate("key-2"); err != nil {
		return err
	}
	rotated := time.Now()
	d.say("no configuration changes; the API server learns the key at its next Status call to the plugin")
	d.say("svm looks every %s here (--encryption-check-interval, a minute by default) and waits until", kmsCheckInterval)
	d.say("every API server writes under the new key, then re-encrypts every Secret")
	m, err := d.waitReencryption(ctx, svm, "key-2")
	if err != nil {
		return err
	}
	d.say("svm created StorageVersionMigration %s %s after the rotation", m.Name, time.Since(rotated).Round(time.Second))
	if err := d.watch(ctx, svm, m.Name); err != nil {
		return err
	}
	if err := d.waitRewrittenUnder(ctx, svm, "key-2"); err != nil {
		return err
	}
	d.step("proof, from etcd's raw bytes")
	return d.proveKMS(ctx, before, svm)
}

// startKMSControlPlane starts the demo's control plane with an API server
// that encrypts Secrets with plugin.
func startKMSControlPlane(ctx context.Context, o options, plugin *kmsplugin.Plugin) (*controlplane.ControlPlane, error) {
	dir, err := os.MkdirTemp("", "svm-demo-kms-")
	if err != nil {
		return nil, err
	}
	config := filepath.Join(dir, "encryption.yaml")
	if err := os.WriteFile(config, kmsplugin.EncryptionConfig(kmsProvider, plugin.Endpoint()), 0o600); err != nil {
		return nil, err
	}
	return controlplane.Start(ctx, controlplane.Options{BinDir: o.BinDir, APIServerFlags: []string{
		"--request-timeout=" + requestTimeout.String(), "--encryption-provider-config=" + config,
	}})
}

// createSecrets creates the demo's namespace and o.Objects Secrets in it.
func (d *demo) createSecrets(ctx context.Context) error {
	kube, err := kubernetes.NewForConfig(d.cp.RESTConfig())
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return err
	}
	for i := range d.o.Objects {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("secret-%05d", i), Namespace: namespace},
			Data:       map[string][]byte{"password": fmt.Appendf(nil, "demo-password-%d", i)},
		}
		if _, err := kube.CoreV1().Secrets(namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// reportKeys prints how many of the demo's Secrets etcd holds under each
// KMS v2 key ID, read from the raw values' envelopes, and returns the
// counts by label (kms:v2:PROVIDER:KEYID).
func (d *demo) reportKeys(ctx context.Context) (map[string]int, error) {
	return d.census(ctx, secretsPrefix, "raw values in etcd under %s, by encryption and key ID:", "Secrets", func(raw []byte) (string, error) {
		label, e := etcdvalue.Label(raw)
		if e.KeyID != "" {
			label += ":" + etcdvalue.QuoteKeyID(e.KeyID)
		}
		return label, nil
	})
}

// secretData reads every demo Secret's data through the API server.
func (d *demo) secretData(ctx context.Context) (map[string]map[string][]byte, error) {
	var list corev1.SecretList
	if err := d.c.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	out := make(map[string]map[string][]byte, len(list.Items))
	for _, s := range list.Items {
		out[s.Name] = s.Data
	}
	return out, nil
}

// secretsState is the name of the Secrets' StorageState.
var secretsState = migrationv1alpha1.StorageStateName(migrationv1alpha1.GroupResource{Resource: "secrets"})

// kmsKeyHash is how the API server's metrics, and svm after them, name a
// KMS v2 key ID.
func kmsKeyHash(keyID string) string { return fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(keyID))) }

// waitRewrittenUnder waits until the Secrets' StorageState records that
// every Secret was rewritten under keyID.
func (d *demo) waitRewrittenUnder(ctx context.Context, svm *svmProcess, keyID string) error {
	want := []migrationv1alpha1.KMSKey{{Provider: kmsProvider, KeyIDHash: kmsKeyHash(keyID)}}
	err := poll(ctx, 5*time.Minute, "StorageState "+secretsState+" to record the Secrets rewritten under "+keyID, func(ctx context.Context) (bool, error) {
		if err := svm.exited(); err != nil {
			return false, err
		}
		var st migrationv1alpha1.StorageState
		if err := d.c.Get(ctx, client.ObjectKey{Name: secretsState}, &st); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return st.Status.Encryption != nil && slices.Equal(st.Status.Encryption.RewrittenKMSKeys, want), nil
	})
	if err != nil {
		return err
	}
	d.say("StorageState %s: status.encryption.rewrittenKMSKeys %s=%s (%s)", secretsState, kmsProvider, want[0].KeyIDHash[:19]+"…", keyID)
	return nil
}

// waitReencryption waits for the migration svm creates to re-encrypt the
// Secrets under keyID.
func (d *demo) waitReencryption(ctx context.Context, svm *svmProcess, keyID string) (*migrationv1alpha1.StorageVersionMigration, error) {
	want := kmsProvider + "=" + kmsKeyHash(keyID)
	var found *migrationv1alpha1.StorageVersionMigration
	err := poll(ctx, 5*time.Minute, "svm to re-encrypt the Secrets under "+keyID, func(ctx context.Context) (bool, error) {
		if err := svm.exited(); err != nil {
			return false, err
		}
		var list migrationv1alpha1.StorageVersionMigrationList
		if err := d.c.List(ctx, &list); err != nil {
			return false, err
		}
		for i, m := range list.Items {
			if m.Annotations[rotation.KMSKeysAnnotation] == want {
				found = &list.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	return found, err
}

// proveKMS checks etcd's raw values and the Secrets' content, and runs
// svm etcd-scan's gate on the old key.
func (d *demo) proveKMS(ctx context.Context, before map[string]map[string][]byte, svm *svmProcess) error {
	counts, err := d.reportKeys(ctx)
	if err != nil {
		return err
	}
	if want := map[string]int{"kms:v2:" + kmsProvider + ":key-2": d.o.Objects}; !maps.Equal(counts, want) {
		return fmt.Errorf("etcd holds %v, want %v", counts, want)
	}
	after, err := d.secretData(ctx)
	if err != nil {
		return err
	}
	if !maps.EqualFunc(before, after, func(a, b map[string][]byte) bool { return maps.EqualFunc(a, b, bytes.Equal) }) {
		return errors.New("Secrets' data changed during the re-encryption")
	}
	d.say("all %d Secrets read back with the same data as before", len(after))
	d.step("svm etcd-scan --resource secrets --fail-on-key key-1 (exits 3 while any value is under key-1)")
	out, err := exec.CommandContext(ctx, d.svmBinary(), "etcd-scan", "--endpoints", d.cp.EtcdURL, "--resource", "secrets", "--fail-on-key", "key-1").CombinedOutput()
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		d.say("%s", line)
	}
	if err != nil {
		return fmt.Errorf("svm etcd-scan --fail-on-key key-1: %w", err)
	}
	d.say("exit 0: no Secret needs key-1 any more; it may be disabled in the KMS")
	d.step("stopping svm, the control plane and the plugin")
	if err := svm.stop(); err != nil {
		return err
	}
	d.say("svm stopped cleanly; its log: %s", svm.logPath)
	return nil
}
