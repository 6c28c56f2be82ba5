package framework

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/svm-project/svm/internal/apiservers"
	"github.com/svm-project/svm/internal/kubeclients"
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

// encryptionConfig is an EncryptionConfiguration that encrypts Secrets
// with aescbc under keys, the first one writing, and reads unencrypted
// ones too.
func encryptionConfig(keys []EncryptionKey) []byte {
	var b strings.Builder
	b.WriteString("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers:\n  - aescbc:\n      keys:\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "      - name: %s\n        secret: %s\n", k.Name, k.Secret)
	}
	b.WriteString("  - identity: {}\n")
	return []byte(b.String())
}

// WriteEncryptionConfig writes an EncryptionConfiguration that encrypts
// Secrets with aescbc under keys, the first one writing, and returns the
// kube-apiserver flag that uses it.
func WriteEncryptionConfig(t testing.TB, dir string, keys ...EncryptionKey) string {
	t.Helper()
	path := filepath.Join(dir, "encryption.yaml")
	WriteEncryptionConfigFile(t, path, keys...)
	return "--encryption-provider-config=" + path
}

// WriteEncryptionConfigFile writes the EncryptionConfiguration of
// WriteEncryptionConfig to path, replacing the file as an operator's
// editor would, and returns its hash as API servers report it
// (apiserver_encryption_config_controller_last_config_info).
func WriteEncryptionConfigFile(t testing.TB, path string, keys ...EncryptionKey) string {
	t.Helper()
	data := encryptionConfig(keys)
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

// AutomaticReloadFlags are the kube-apiserver flags that use the
// encryption configuration at path and reload it when it changes (the
// server looks at the file every minute).
func AutomaticReloadFlags(path string) []string {
	return []string{"--encryption-provider-config=" + path, "--encryption-provider-config-automatic-reload=true"}
}

// WaitEncryptionConfig waits until the API server that cfg reaches
// reports that it has loaded the encryption configuration hash. API
// servers look at their configuration file once a minute.
func WaitEncryptionConfig(t testing.TB, cfg *rest.Config, hash string) {
	t.Helper()
	var last apiservers.Report
	client, lastErr := kubeclients.NewEndpoints(cfg).For(cfg.Host)
	if lastErr != nil {
		t.Fatal(lastErr)
	}
	// Once a second: an API server's metrics run to megabytes.
	err := wait.PollUntilContextTimeout(t.Context(), time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		last, lastErr = apiservers.Scrape(ctx, client, cfg.Host)
		return lastErr == nil && last.ConfigHash == hash, nil
	})
	if err != nil {
		t.Fatalf("API server %s did not load encryption configuration %s: it reports %q (read error: %v)", cfg.Host, hash, last.ConfigHash, lastErr)
	}
}
