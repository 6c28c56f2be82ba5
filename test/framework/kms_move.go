package framework

import (
	"crypto/sha256"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/svm-project/svm/internal/etcdvalue"
)

// EncryptionProvider is one provider of an EncryptionConfiguration's list
// for Secrets, as the YAML of its list item. The first provider of a list
// writes, and every one reads: a move from one provider to another puts
// the new one first and keeps the old one after it, so that what it
// sealed still reads until everything is rewritten.
type EncryptionProvider string

// KMSv2 is the KMS v2 provider named name, served at endpoint
// ("unix:///path"). apiVersion v2 is stated: it defaults to v1, which
// kube-apiserver refuses unless the deprecated KMSv1 feature gate is on.
func KMSv2(name, endpoint string) EncryptionProvider {
	return EncryptionProvider(fmt.Sprintf("  - kms:\n      apiVersion: v2\n      name: %s\n      endpoint: %s\n      timeout: 3s\n", name, endpoint))
}

// AESCBC is the aescbc provider with keys, the first one writing.
func AESCBC(keys ...EncryptionKey) EncryptionProvider {
	var b strings.Builder
	b.WriteString("  - aescbc:\n      keys:\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "      - name: %s\n        secret: %s\n", k.Name, k.Secret)
	}
	return EncryptionProvider(b.String())
}

// Identity stores values unencrypted when it comes first, and reads
// unencrypted values after another.
const Identity EncryptionProvider = "  - identity: {}\n"

// WriteEncryptionProvidersFile writes to path an EncryptionConfiguration
// that stores Secrets with providers, in their order, replacing the file
// as an operator's editor would, and returns its hash as API servers
// report it (apiserver_encryption_config_controller_last_config_info).
func WriteEncryptionProvidersFile(t testing.TB, path string, providers ...EncryptionProvider) string {
	t.Helper()
	if len(providers) == 0 {
		t.Fatal("an EncryptionConfiguration needs a provider")
	}
	var b strings.Builder
	b.WriteString("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n")
	for _, p := range providers {
		b.WriteString(string(p))
	}
	data := []byte(b.String())
	// Write and rename, so that an API server reloading it never reads
	// half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("sha256:%x", sha256.Sum256(data))
}

// StoredEncryptions reads every value under prefix and counts them as
// svm etcd-scan's table shows them: "aescbc:v1:key1", "identity", or, for
// KMS v2, with the key ID that sealed the value,
// "kms:v2:<provider>:<keyID>". It fails the test on a value it cannot
// classify.
func (e *Env) StoredEncryptions(t testing.TB, prefix string) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for key, raw := range e.RawValues(t, prefix) {
		label, enc := etcdvalue.Label(raw)
		switch {
		case label == etcdvalue.Unrecognised:
			t.Fatalf("etcd value %s is neither encrypted as kube-apiserver encrypts nor plain", key)
		case enc.KeyID != "":
			label += ":" + etcdvalue.QuoteKeyID(enc.KeyID)
		}
		counts[label]++
	}
	return counts
}
