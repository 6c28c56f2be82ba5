package cli_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestRotateEncryptionKey is the operator's key rotation end to end: add a
// new key first, rewrite every Secret with svm, drop the old key, and every
// Secret still reads back identically. It restarts the API server with new
// encryption configurations, on a control plane of its own.
func TestRotateEncryptionKey(t *testing.T) {
	t.Parallel()
	cfgDir := t.TempDir()
	oldKey, newKey := framework.NewEncryptionKey(t, "old"), framework.NewEncryptionKey(t, "new")
	env := framework.Start(t, controlplane.Options{APIServerFlags: []string{framework.WriteEncryptionConfig(t, cfgDir, oldKey)}})
	ctx := framework.Context(t, 5*time.Minute)

	const n = 300
	namespaces := []string{"team-a", "team-b", "team-c"}
	for _, ns := range namespaces {
		env.CreateNamespace(t, ns)
	}
	for i := range n {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("secret-%04d", i), Namespace: namespaces[i%3], Labels: map[string]string{"i": fmt.Sprint(i)}},
			Data:       map[string][]byte{"password": fmt.Appendf(nil, "s3cr3t-%d", i), "blob": make([]byte, 100+i)},
		}
		if _, err := env.Kube.CoreV1().Secrets(s.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	secrets := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	before := env.TakeSnapshot(t, secrets)
	stored := func() map[string]int {
		all := map[string]int{}
		for _, ns := range namespaces {
			for k, v := range env.StoredVersions(t, "/registry/secrets/"+ns+"/") {
				all[k] += v
			}
		}
		return all
	}
	if diff := cmp.Diff(map[string]int{"encrypted:aescbc:old": n}, stored()); diff != "" {
		t.Fatalf("before rotation (-want +got):\n%s", diff)
	}

	// Step 1: the new key writes, the old one still reads.
	env.CP.SetAPIServerFlags(framework.WriteEncryptionConfig(t, cfgDir, newKey, oldKey))
	if err := env.CP.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	kubeconfig := env.KubeconfigFile(t)
	// Step 2: rewrite every Secret.
	code, stdout, stderr := svm(t, "migrate", "--kubeconfig", kubeconfig, "secrets")
	if code != 0 {
		t.Fatalf("svm migrate secrets exited %d\n%s\n%s", code, stdout, stderr)
	}
	if diff := cmp.Diff(map[string]int{"encrypted:aescbc:new": n}, stored()); diff != "" {
		t.Errorf("after migration (-want +got):\n%s", diff)
	}

	// Step 3: drop the old key; every Secret still reads back as before.
	env.CP.SetAPIServerFlags(framework.WriteEncryptionConfig(t, cfgDir, newKey))
	if err := env.CP.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	env.ExpectUnchanged(t, secrets, before)
}
