package bench

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/framework"
)

// memoryBound is the peak RSS every pass of BenchmarkMemory must stay
// under: the shipped container's limit (256Mi) with room to spare.
const memoryBound = 200e6

// shippedMemoryLimit is the memory limit of config/manager and the chart,
// which set GOMEMLIMIT from it.
const shippedMemoryLimit = "256MiB"

// shippedGC is the garbage collector's target (GOGC) of config/manager and
// the chart.
const shippedGC = "50"

// shippedRuntime says in a result's strategy how svm controller's Go
// runtime was set: as config/manager and the chart set it.
const shippedRuntime = "GOMEMLIMIT=" + shippedMemoryLimit + ", GOGC=" + shippedGC

// shippedEnv is this process's environment with svm controller's Go
// runtime set as config/manager and the chart set it.
func shippedEnv() []string {
	return append(os.Environ(), "GOMEMLIMIT="+shippedMemoryLimit, "GOGC="+shippedGC)
}

// lastApplied is the annotation kubectl apply (client-side) keeps the
// applied manifest in, a Secret's data included.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// BenchmarkMemory migrates Secrets of a megabyte each after an encryption
// key rotation, with `svm migrate` and with `svm controller` under the
// shipped memory limit and garbage collector target (GOMEMLIMIT=256MiB, GOGC=50), every pass verified in etcd,
// and fails a pass whose peak RSS (VmHWM) reaches 200 MB: svm's memory
// must follow neither the objects' size nor their order. Each part runs
// on a control plane of its own:
//
//   - plain: Secrets of 1 MB of data, which a metadata list does not bring;
//   - annotated: Secrets of 1 MB whose metadata carries a kubectl
//     last-applied-configuration annotation of 256 KB (the most the API
//     allows), which it does.
//
// Each part migrates the large Secrets alone, then behind small ones
// listed before them, so that a list sized from small objects meets large
// ones. SVM_BENCH_MEMORY_LARGE and SVM_BENCH_MEMORY_SMALL set their
// numbers (default 1000 and 500). A third part, small, migrates
// SVM_BENCH_MEMORY_SMALL_ONLY small Secrets (default 10000) and nothing
// else: what reading lists as a stream costs where it bounds nothing,
// against another build (below). SVM_BENCH_MEMORY_FLAGS lists sets of
// svm's flags, apart by ";" (an empty set is svm's defaults, the default),
// each run by both commands; a set whose first word is svm=PATH runs the
// svm binary at PATH, such as a build of an earlier commit. They run in
// SVM_BENCH_ROUNDS rounds (default 1), interleaved. Run it with `make
// bench BENCH=BenchmarkMemory`, or one part: BenchmarkMemory/annotated.
func BenchmarkMemory(b *testing.B) {
	svmBinary = framework.SVMBinary(b)
	large := envInt("SVM_BENCH_MEMORY_LARGE", 1000)
	small := envInt("SVM_BENCH_MEMORY_SMALL", 500)
	rounds := envInt("SVM_BENCH_ROUNDS", 1)
	var strategies []strategy
	for _, set := range flagSets("SVM_BENCH_MEMORY_FLAGS", [][]string{nil}) {
		binary, flags := svmBuildOf(set)
		build := "svm"
		if binary != "" {
			build = filepath.Base(binary)
		}
		suffix := strings.Join(append([]string{""}, flags...), " ")
		strategies = append(strategies,
			svmBuildAs(binary, build+" migrate"+suffix, "", flags...),
			svmController(binary, build+" controller"+suffix+" ("+shippedRuntime+")", flags...))
	}
	var results []result
	for _, annotated := range []bool{false, true} {
		part := map[bool]string{false: "plain", true: "annotated"}[annotated]
		b.Run(part, func(b *testing.B) {
			results = append(results, memoryPart(b, part, annotated, large, small, rounds, strategies)...)
		})
	}
	b.Run("small", func(b *testing.B) {
		w, _ := rotatedSecrets(b, "")
		w.objects = envInt("SVM_BENCH_MEMORY_SMALL_ONLY", 10000)
		w.name = fmt.Sprintf("%d small Secrets after a key rotation", w.objects)
		createSecrets(b, w.env, w.objects)
		results = append(results, compare(b, w, rounds, strategies...)...)
	})
	var targets []target
	for _, r := range results {
		targets = append(targets, target{
			what:     fmt.Sprintf("%s on %s: peak RSS under %.0f MB", r.strategy, r.workload, memoryBound/1e6),
			measured: fmt.Sprintf("%.0f MB", float64(r.peakRSS())/1e6),
			met:      r.peakRSS() < memoryBound,
		})
	}
	writeResults(b, results, nil, targets)
}

// memoryPart runs the strategies (svm migrate and svm controller) on large
// Secrets of 1 MB, alone and then behind small ones.
func memoryPart(b *testing.B, part string, annotated bool, large, small, rounds int, strategies []strategy) []result {
	w, _ := rotatedSecrets(b, "")
	createLargeSecrets(b, w.env, large, annotated)
	var out []result
	run := func() {
		for _, r := range compare(b, w, rounds, strategies...) {
			if r.peakRSS() >= memoryBound {
				b.Errorf("%s on %s: peak RSS %.0f MB, want under %.0f MB", r.strategy, r.workload, float64(r.peakRSS())/1e6, memoryBound/1e6)
			}
			out = append(out, r)
		}
	}
	w.objects = large
	w.name = fmt.Sprintf("%d Secrets of 1 MB (%s) after a key rotation", large, part)
	run()
	// createSecrets names them secret-00000 on, listed before
	// secret-large-0000 on.
	createSecrets(b, w.env, small)
	w.objects = large + small
	w.name = fmt.Sprintf("%d Secrets of 1 MB (%s) behind %d small ones, after a key rotation", large, part, small)
	run()
	return out
}

// createLargeSecrets creates n Secrets of 1 MB in namespace bench, named
// secret-large-0000 on. With annotated, 256 KB of each is in its metadata:
// the annotation kubectl apply writes, holding the manifest it applied.
func createLargeSecrets(b *testing.B, env *framework.Env, n int, annotated bool) {
	b.Helper()
	ctx := framework.Context(b, 20*time.Minute)
	start := time.Now()
	errs := make(chan error, n)
	sem := make(chan struct{}, 8)
	for i := range n {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			s, err := largeSecret(fmt.Sprintf("secret-large-%04d", i), annotated)
			if err == nil {
				_, err = env.Kube.CoreV1().Secrets("bench").Create(ctx, s, metav1.CreateOptions{FieldManager: "kubectl-client-side-apply"})
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			b.Fatalf("create large secrets: %v", err)
		}
	}
	b.Logf("%d Secrets of 1 MB created in %s", n, time.Since(start).Round(time.Second))
}

// largeSecret is a Secret of 1 MB of random data. Annotated, part of its
// data was applied with kubectl, whose annotation then holds it (base64)
// and takes the annotations' whole allowance (256 KiB).
func largeSecret(name string, annotated bool) (*corev1.Secret, error) {
	const size, annotationsLimit = 1_000_000, 256 << 10
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench"}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{}}
	if annotated {
		// The manifest's bytes around the data, then as much data as
		// fills the annotation, in base64.
		empty, err := appliedManifest(name, "")
		if err != nil {
			return nil, err
		}
		room := annotationsLimit - len(lastApplied) - len(empty) - 16
		config := random(room / 4 * 3)
		manifest, err := appliedManifest(name, base64.StdEncoding.EncodeToString(config))
		if err != nil {
			return nil, err
		}
		s.Annotations = map[string]string{lastApplied: manifest}
		s.Data["config"] = config
	}
	used := len(s.Data["config"]) + len(s.Annotations[lastApplied])
	s.Data["blob"] = random(size - used)
	return s, nil
}

// appliedManifest is the annotation kubectl apply writes for a Secret
// named name whose data key config holds data (base64).
func appliedManifest(name, data string) (string, error) {
	m := map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
		"metadata": map[string]any{"annotations": map[string]any{}, "name": name, "namespace": "bench"},
		"data":     map[string]any{"config": data},
	}
	out, err := json.Marshal(m)
	return string(out) + "\n", err
}

func random(n int) []byte {
	out := make([]byte, n)
	_, _ = rand.Read(out)
	return out
}

// svmController is `svm controller` as a strategy, the svm binary at path
// (the run's build when empty) with flags, and GOMEMLIMIT and GOGC set as the
// shipped manifests set them (GOMEMLIMIT from the container's memory limit): a pass
// creates a StorageVersionMigration of the resource and ends when it has
// Succeeded. The process is started before the pass (its start-up is not
// timed, but its memory counts: VmHWM since it started) and stopped after
// it; nothing else runs the migration, the trigger and re-encryption
// being off.
func svmController(binary, name string, flags ...string) strategy {
	c := &controllerRun{binary: binary, flags: flags}
	return strategy{name: name, prepare: c.prepare, run: c.run}
}

type controllerRun struct {
	binary string
	flags  []string
	cmd    *exec.Cmd
	name   string
}

func (c *controllerRun) prepare(b *testing.B, w *workload) func(b *testing.B, prefix string, u *usage) {
	b.Helper()
	if !crdsInstalled[w.env] {
		w.env.InstallCRDs(b, framework.CRDBasesDir())
		crdsInstalled[w.env] = true
	}
	dir := b.TempDir()
	kubeconfig := filepath.Join(dir, "svm.kubeconfig")
	if err := w.env.CP.WriteKubeconfig(kubeconfig); err != nil {
		b.Fatal(err)
	}
	log, err := os.Create(filepath.Join(dir, "svm-controller.log"))
	if err != nil {
		b.Fatal(err)
	}
	args := framework.ControllerArgs(append([]string{"--kubeconfig", kubeconfig, "--leader-elect=false", "--trigger=false",
		"--encrypted-resources=", "--executor=svm"}, c.flags...)...)
	c.cmd = exec.Command(cmp.Or(c.binary, svmBinary), args...)
	c.cmd.Stdout, c.cmd.Stderr = log, log
	c.cmd.Env = shippedEnv()
	if err := c.cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.stop)
	time.Sleep(2 * time.Second)
	if _, err := settle(c.cmd.Process.Pid, settleLimit); err != nil {
		b.Fatal(err)
	}
	return func(b *testing.B, _ string, _ *usage) {
		b.Helper()
		c.stop()
		_ = log.Close()
		m := &migrationv1alpha1.StorageVersionMigration{}
		m.Name = c.name
		if err := w.env.Client.Delete(framework.Context(b, time.Minute), m); err != nil && !apierrors.IsNotFound(err) {
			b.Fatalf("delete %s: %v", c.name, err)
		}
	}
}

func (c *controllerRun) stop() { stopProcess(c.cmd, 30*time.Second) }

// run creates the pass's migration and polls it until svm has set
// Succeeded, sampling the controller's peak RSS meanwhile.
func (c *controllerRun) run(ctx context.Context, w *workload) (usage, error) {
	pid := c.cmd.Process.Pid
	cpu0, err := processCPU(pid)
	if err != nil {
		return usage{}, err
	}
	m := &migrationv1alpha1.StorageVersionMigration{}
	m.GenerateName = "bench-memory-"
	m.Spec.Resource = migrationv1alpha1.GroupVersionResource{Group: w.resource.Group, Version: w.resource.Version, Resource: w.resource.Resource}
	if err := w.env.Client.Create(ctx, m); err != nil {
		return usage{}, fmt.Errorf("create the migration: %w", err)
	}
	c.name = m.Name
	var peak int64
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for polls := 0; ; polls++ {
		select {
		case <-ctx.Done():
			return usage{}, fmt.Errorf("migration %s: %w", m.Name, ctx.Err())
		case <-tick.C:
		}
		peak = max(peak, vmHWM(pid))
		if polls%4 != 0 {
			continue
		}
		got := &migrationv1alpha1.StorageVersionMigration{}
		if err := w.env.Client.Get(ctx, client.ObjectKey{Name: m.Name}, got); err != nil {
			continue
		}
		if got.HasCondition(migrationv1alpha1.MigrationFailed) {
			return usage{}, fmt.Errorf("migration %s failed: %+v", m.Name, got.Status.Conditions)
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
