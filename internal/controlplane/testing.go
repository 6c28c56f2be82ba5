package controlplane

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"
)

// ForTest starts a control plane for one test and stops it when the test
// ends. When the test fails, the tail of the API server's log is attached,
// and of kube-controller-manager's when it ran.
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
			t.Logf("kube-apiserver log tail:\n%s", logTail(cp.path("kube-apiserver.log"), 40))
			if cp.controllerManagerIfSet() != nil {
				t.Logf("kube-controller-manager log tail:\n%s", logTail(cp.ControllerManagerLog(), 40))
			}
		}
		if err := cp.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
	})
	return cp
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
