package framework

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svm-project/svm/test/controlplane"
)

// RunHelm runs bin/helm (make helm) from the repository root, with a Helm
// home of the test's own so that no user's configuration or repository
// cache takes part.
func RunHelm(t testing.TB, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	dir := os.Getenv(controlplane.BinDirEnv)
	if dir == "" {
		dir = filepath.Join(RepoRoot(), "bin")
	}
	bin := filepath.Join(dir, "helm")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("helm not built: %v (run 'make helm')", err)
	}
	home := t.TempDir()
	cmd := exec.CommandContext(Context(t, 2*time.Minute), bin, args...)
	cmd.Dir = RepoRoot()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HELM_") && !strings.HasPrefix(kv, "KUBECONFIG=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// A kubeconfig that does not exist: Helm's default namespace is then
	// default, and only --kubeconfig reaches a cluster.
	cmd.Env = append(cmd.Env,
		"KUBECONFIG="+filepath.Join(home, "kubeconfig"),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}
