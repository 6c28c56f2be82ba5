package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svm-project/svm/test/framework"
)

// The reference migrator's two settings, as the table names them.
const (
	refShippedName   = "reference migrator v0.0.5 (shipped flags: --kube-api-qps=40)"
	refUnlimitedName = "reference migrator v0.0.5 (--kube-api-qps=1000)"
)

// refShippedFlags are the flags the reference migrator's own deployment
// manifest runs it with (manifests/migrator.yaml of its v0.0.5 release).
var refShippedFlags = []string{"--v=2", "--alsologtostderr", "--kube-api-qps=40", "--kube-api-burst=1000"}

// refUnlimitedFlags lift its client's rate limit to 1000 requests per
// second: what it does when only its own design holds it back (one object
// at a time, a full Update each).
var refUnlimitedFlags = []string{"--v=2", "--alsologtostderr", "--kube-api-qps=1000", "--kube-api-burst=1000"}

// refMigrator is the reference migrator (sigs.k8s.io/kube-storage-version-
// migrator's cmd/migrator at its last release, built by make
// ref-migrator) as a strategy. Its API is svm's: a pass creates a
// migration.k8s.io/v1alpha1 StorageVersionMigration of the resource, with
// svm's CRD installed (field for field the reference's), and ends when it
// has the condition Succeeded. The process is started before the pass is
// timed, once quiet, and stopped after it is verified; the second it takes
// at most to notice a new migration (it polls every second) is part of the
// pass, as an operator waits for it too. No other strategy runs while it
// does: it acts on every migration in the cluster.
//
// It serves its metrics and health checks on port 2112 of every interface
// (its address is not a flag); for the length of its passes only.
func refMigrator(name string, flags ...string) strategy {
	r := &refRun{flags: flags}
	return strategy{name: name, prepare: r.prepare, run: r.run}
}

// crdsInstalled are the control planes svm's CRDs were installed on.
var crdsInstalled = map[*framework.Env]bool{}

type refRun struct {
	flags []string
	cmd   *exec.Cmd
	name  string
}

// refBinary is bin/ref-migrator, next to the control plane's binaries.
func refBinary(b *testing.B) string {
	b.Helper()
	dir := os.Getenv("SVM_BIN_DIR")
	path := filepath.Join(dir, "ref-migrator")
	if _, err := os.Stat(path); dir == "" || err != nil {
		b.Fatalf("the reference migrator is not built at %q (make ref-migrator; make bench builds it)", path)
	}
	return path
}

func (r *refRun) prepare(b *testing.B, w *workload) func(b *testing.B, prefix string, u *usage) {
	b.Helper()
	if !crdsInstalled[w.env] {
		w.env.InstallCRDs(b, framework.CRDBasesDir())
		crdsInstalled[w.env] = true
	}
	kubeconfig := filepath.Join(b.TempDir(), "ref.kubeconfig")
	if err := w.env.CP.WriteKubeconfig(kubeconfig); err != nil {
		b.Fatal(err)
	}
	log, err := os.Create(filepath.Join(b.TempDir(), "ref-migrator.log"))
	if err != nil {
		b.Fatal(err)
	}
	r.cmd = exec.Command(refBinary(b), append([]string{"--kubeconfig", kubeconfig}, r.flags...)...)
	r.cmd.Stdout, r.cmd.Stderr = log, log
	if err := r.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { r.stop() })
	// Its informer lists the (empty) migrations at start; then it is idle.
	time.Sleep(2 * time.Second)
	if _, err := settle(r.cmd.Process.Pid, settleLimit); err != nil {
		b.Fatal(err)
	}
	return func(b *testing.B, _ string, _ *usage) {
		b.Helper()
		r.stop()
		m := &migrationv1alpha1.StorageVersionMigration{}
		m.Name = r.name
		if err := w.env.Client.Delete(framework.Context(b, time.Minute), m); err != nil && !apierrors.IsNotFound(err) {
			b.Fatalf("delete %s: %v", r.name, err)
		}
		_ = log.Close()
	}
}

func (r *refRun) stop() { stopProcess(r.cmd, 10*time.Second) }

// stopProcess stops cmd's process, if it runs, with SIGTERM, and kills it
// if it has not exited after grace.
func stopProcess(cmd *exec.Cmd, grace time.Duration) {
	if cmd == nil || cmd.ProcessState != nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}

// run creates the pass's migration and polls it until the reference
// migrator has set Succeeded (or Failed).
func (r *refRun) run(ctx context.Context, w *workload) (usage, error) {
	pid := r.cmd.Process.Pid
	cpu0, err := processCPU(pid)
	if err != nil {
		return usage{}, err
	}
	m := &migrationv1alpha1.StorageVersionMigration{}
	m.GenerateName = "bench-ref-"
	m.Spec.Resource = migrationv1alpha1.GroupVersionResource{Group: w.resource.Group, Version: w.resource.Version, Resource: w.resource.Resource}
	if err := w.env.Client.Create(ctx, m); err != nil {
		return usage{}, fmt.Errorf("create the reference migrator's migration: %w", err)
	}
	r.name = m.Name
	var peak int64
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return usage{}, fmt.Errorf("the reference migrator's migration %s: %w", m.Name, ctx.Err())
		case <-tick.C:
		}
		peak = max(peak, vmHWM(pid))
		got := &migrationv1alpha1.StorageVersionMigration{}
		if err := w.env.Client.Get(ctx, client.ObjectKey{Name: m.Name}, got); err != nil {
			continue
		}
		if got.HasCondition(migrationv1alpha1.MigrationFailed) {
			return usage{}, fmt.Errorf("the reference migrator's migration %s failed: %+v", m.Name, got.Status.Conditions)
		}
		if got.HasCondition(migrationv1alpha1.MigrationSucceeded) {
			break
		}
	}
	cpu1, err := processCPU(pid)
	if err != nil {
		return usage{}, err
	}
	return usage{cpu: cpu1 - cpu0, peakRSS: max(peak, vmHWM(pid)), process: true}, nil
}
