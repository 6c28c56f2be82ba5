package controlplane

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// ArtifactsEnv names the environment variable that, when set to a
// directory, makes a failed test keep its processes' whole logs there
// (under the test's name), beside the tails printed with its output.
const ArtifactsEnv = "SVM_TEST_ARTIFACTS"

// ForTest starts a control plane for one test and stops it when the test
// ends. When the test fails, the tails of etcd's and the API server's logs
// are attached, and of kube-controller-manager's when it ran: a stall is
// told apart from a failure by what etcd said at the same moment.
func ForTest(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("start control plane: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs := map[string]string{"etcd.log": cp.path("etcd.log"), "kube-apiserver.log": cp.path("kube-apiserver.log")}
			t.Logf("etcd log tail:\n%s", logTail(logs["etcd.log"], 20))
			t.Logf("kube-apiserver log tail:\n%s", logTail(logs["kube-apiserver.log"], 40))
			if cp.controllerManagerIfSet() != nil {
				logs["kube-controller-manager.log"] = cp.ControllerManagerLog()
				t.Logf("kube-controller-manager log tail:\n%s", logTail(logs["kube-controller-manager.log"], 40))
			}
			for name, path := range logs {
				KeepArtifact(t, name, path)
			}
		}
		if err := cp.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
	})
	return cp
}

var notPathSafe = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// KeepArtifact copies the file at path to the test's artifacts directory
// under name, when ArtifactsEnv is set; it says where in the test's log.
func KeepArtifact(t testing.TB, name, path string) {
	t.Helper()
	root := os.Getenv(ArtifactsEnv)
	if root == "" {
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Logf("keep %s: %v", name, err)
		return
	}
	dir := filepath.Join(root, notPathSafe.ReplaceAllString(t.Name(), "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("keep %s: %v", name, err)
		return
	}
	dst := filepath.Join(dir, name)
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		t.Logf("keep %s: %v", name, err)
		return
	}
	t.Logf("kept %s", dst)
}

func logTail(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	all := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return string(bytes.Join(all, []byte("\n")))
}
