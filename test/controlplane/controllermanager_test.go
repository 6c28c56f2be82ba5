package controlplane

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A bin/ directory built before kube-controller-manager joined make
// controlplane still runs everything else, and asking for the controller
// manager there fails at once, before any process starts, saying what to
// run.
func TestStartWithoutControllerManagerBinary(t *testing.T) {
	binDir := t.TempDir()
	for _, name := range []string{"kube-apiserver", "etcd"} {
		if err := os.WriteFile(filepath.Join(binDir, name), []byte("#!/bin/false\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	_, err := Start(context.Background(), Options{BinDir: binDir, Dir: dir, ControllerManager: true})
	if err == nil || !strings.Contains(err.Error(), "kube-controller-manager") || !strings.Contains(err.Error(), "make controlplane") {
		t.Fatalf("Start = %v, want an error naming kube-controller-manager and make controlplane", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("Start left %d files in %s; it should fail before preparing anything", len(entries), dir)
	}

	cp := &ControlPlane{Dir: dir, binDir: binDir}
	if err := cp.StartControllerManager(context.Background()); err == nil || !strings.Contains(err.Error(), "make controlplane") {
		t.Errorf("StartControllerManager = %v, want an error naming make controlplane", err)
	}
	// The helpers are safe on a control plane whose controller manager
	// never ran.
	if cp.ControllerManagerRunning() || cp.ControllerManagerPID() != 0 {
		t.Error("controller manager reported running though it never started")
	}
	if err := cp.StopControllerManager(); err != nil {
		t.Errorf("StopControllerManager: %v", err)
	}
	if err := cp.KillControllerManager(); err != nil {
		t.Errorf("KillControllerManager: %v", err)
	}
}
