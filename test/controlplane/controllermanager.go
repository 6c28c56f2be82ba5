package controlplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Kubernetes 1.37 ships its own storage version migrator, a controller in
// kube-controller-manager that acts on storagemigration.k8s.io/v1
// StorageVersionMigrations. Running the real one beside the API server lets
// tests and the demo compare svm with it on the same cluster, and check
// that the two do not get in each other's way.

const (
	controllerManagerBinary = "kube-controller-manager"
	// migratorController is the name under which kube-controller-manager
	// runs its storage version migrator.
	migratorController = "storage-version-migrator-controller"
	// The migrator reads the objects to migrate from the garbage
	// collector's metadata informers, and refuses to start without it.
	garbageCollectorController = "garbage-collector-controller"
)

// StartControllerManager starts kube-controller-manager, running only the
// storage version migrator and the garbage collector it needs, and waits
// until its health endpoint lists the migrator as healthy. It can be
// started again after StopControllerManager or KillControllerManager, on the
// same port. The binary must be next to kube-apiserver (make controlplane).
func (cp *ControlPlane) StartControllerManager(ctx context.Context) error {
	release := cp.Release()
	if err := requireControllerManager(cp.binDir, release); err != nil {
		return err
	}
	p, err := cp.controllerManagerProcess()
	if err != nil {
		return err
	}
	cp.mu.Lock()
	p.path = binaryFor(cp.binDir, controllerManagerBinary, release)
	cp.mu.Unlock()
	if err := p.start(); err != nil {
		return err
	}
	// The health endpoints are served without authentication (they are in
	// kube-controller-manager's --authorization-always-allow-paths, and
	// anonymous requests are allowed), over a certificate it signed itself:
	// nothing else about the server is trusted or sent.
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback health probe only
	}}
	defer client.CloseIdleConnections()
	healthURL := cp.controllerManagerURL + "/healthz?verbose"
	ready := migratorController
	if cp.withoutMigrator {
		ready = garbageCollectorController
	}
	err = p.waitReady(ctx, cp.startTimeout, func(ctx context.Context) error {
		return controllerHealthy(ctx, client, healthURL, ready)
	})
	if err != nil {
		_ = p.stop(syscall.SIGKILL, 0)
	}
	return err
}

// requireControllerManager explains what to do when binDir has no
// kube-controller-manager: it is needed only by those who ask for it, so
// findBinDir does not insist on it, and a bin/ directory built before it was
// added to make controlplane lacks it.
func requireControllerManager(binDir, release string) error {
	path := binaryFor(binDir, controllerManagerBinary, release)
	if fi, err := os.Stat(path); err != nil || fi.IsDir() {
		target := "controlplane"
		if release != "" {
			target = "matrix-kcm"
		}
		return fmt.Errorf("%s has no %s; run 'make %s'", binDir, filepath.Base(path), target)
	}
	return nil
}

// controllerManagerProcess returns the kube-controller-manager process,
// set up on first use: a port, a kubeconfig and a certificate directory of
// its own, kept across restarts.
func (cp *ControlPlane) controllerManagerProcess() (*process, error) {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.controllerManager != nil {
		return cp.controllerManager, nil
	}
	ports, err := cp.freePorts(1)
	if err != nil {
		return nil, err
	}
	kubeconfig := cp.path("kube-controller-manager.kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		return nil, err
	}
	cp.controllerManagerURL = "https://127.0.0.1:" + strconv.Itoa(ports[0])
	controllers := migratorController + "," + garbageCollectorController
	if cp.withoutMigrator {
		controllers = garbageCollectorController
	}
	cp.controllerManager = &process{
		name:    controllerManagerBinary,
		logPath: cp.ControllerManagerLog(),
		args: []string{
			"--kubeconfig=" + kubeconfig,
			"--controllers=" + controllers,
			// Leader election as in a real cluster: its lease in kube-system
			// is how svm controller tells that a kube-controller-manager is
			// running. The default periods (15 s lease, 10 s to renew): with
			// a 4 s renew deadline a loaded 2-core machine made it lose the
			// lease and exit mid-test; a restart after a kill takes the lease
			// over within the 15 s.
			"--leader-elect=true",
			"--leader-elect-lease-duration=15s",
			"--leader-elect-renew-deadline=10s",
			"--leader-elect-retry-period=2s",
			// Every controller uses the admin credentials of the kubeconfig:
			// the service account token controller that would mint per
			// controller credentials is not running.
			"--use-service-account-credentials=false",
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(ports[0]),
			"--cert-dir=" + cp.path("kube-controller-manager-certs"),
			// What the root CA publisher, when --controllers runs it
			// (test/node), gives pods as kube-root-ca.crt.
			"--root-ca-file=" + cp.ServingCertFile(),
		},
	}
	cp.controllerManager.args = append(cp.controllerManager.args, cp.controllerManagerFlags...)
	return cp.controllerManager, nil
}

// controllerHealthy reports whether url (a verbose /healthz) answers 200 and
// lists controller as healthy. /healthz alone answers 200 as soon as the
// server listens, before any controller is built; each built controller
// adds a check of its own, so its check says it was not skipped (as the
// migrator would be with its feature gate off).
func controllerHealthy(ctx context.Context, client *http.Client, url, controller string) error {
	body, err := httpGet(ctx, client, url)
	if err != nil {
		return err
	}
	if !bytes.Contains(body, []byte("[+]"+controller+" ok")) {
		return fmt.Errorf("%s: %s not running yet", url, controller)
	}
	return nil
}

// StopControllerManager stops kube-controller-manager gracefully (SIGTERM).
// It is a no-op when it never ran.
func (cp *ControlPlane) StopControllerManager() error {
	if p := cp.controllerManagerIfSet(); p != nil {
		return p.stop(syscall.SIGTERM, 30*time.Second)
	}
	return nil
}

// KillControllerManager kills kube-controller-manager with SIGKILL, as a
// crash would.
func (cp *ControlPlane) KillControllerManager() error {
	if p := cp.controllerManagerIfSet(); p != nil {
		return p.stop(syscall.SIGKILL, 0)
	}
	return nil
}

// ControllerManagerPID is kube-controller-manager's process id (0 when
// stopped), for benchmarks that read its CPU and memory accounting.
func (cp *ControlPlane) ControllerManagerPID() int {
	if p := cp.controllerManagerIfSet(); p != nil {
		return p.pid()
	}
	return 0
}

// ControllerManagerRunning reports whether kube-controller-manager is
// running.
func (cp *ControlPlane) ControllerManagerRunning() bool {
	if p := cp.controllerManagerIfSet(); p != nil {
		return p.running()
	}
	return false
}

// ControllerManagerLog is the path of kube-controller-manager's log; the
// file exists once it has been started.
func (cp *ControlPlane) ControllerManagerLog() string {
	return cp.path("kube-controller-manager.log")
}

func (cp *ControlPlane) controllerManagerIfSet() *process {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return cp.controllerManager
}
