package framework

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Kubectl runs kubectl (built from modules by `make kubectl`, next to
// kube-apiserver) against e's API server with stdin as its input, and
// returns what it printed. Tests use it for what operators do with
// kubectl: apply manifests, run svm as a plugin.
func (e *Env) Kubectl(t testing.TB, stdin []byte, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	bin := e.CP.BinPath("kubectl")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("kubectl not built: %v (run 'make kubectl')", err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := e.CP.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(Context(t, 2*time.Minute), bin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}
