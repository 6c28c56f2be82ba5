package framework

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// EncryptionKey is a named aescbc key for encryption at rest.
type EncryptionKey struct {
	Name   string
	Secret string // base64 of 32 random bytes
}

// NewEncryptionKey makes a fresh random key.
func NewEncryptionKey(t testing.TB, name string) EncryptionKey {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return EncryptionKey{Name: name, Secret: base64.StdEncoding.EncodeToString(b)}
}

// WriteEncryptionConfig writes an EncryptionConfiguration that encrypts
// Secrets with aescbc under keys, the first one writing, and returns the
// kube-apiserver flag that uses it.
func WriteEncryptionConfig(t testing.TB, dir string, keys ...EncryptionKey) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc:\n      keys:\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "      - name: %s\n        secret: %s\n", k.Name, k.Secret)
	}
	b.WriteString("  - identity: {}\n")
	path := filepath.Join(dir, "encryption.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return "--encryption-provider-config=" + path
}
