package bench

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// workload is a resource whose objects a pass must rewrite, and how to
// make every one of them stale before a pass.
type workload struct {
	name     string
	resource schema.GroupVersionResource
	// svmName is the resource as `svm migrate` takes it.
	svmName string
	objects int
	// stale makes every object stored in an outdated form and returns the
	// stored forms (etcd prefix, and counts) a pass must leave.
	stale func(b *testing.B) (prefix string, want map[string]int)
	// during, if set, runs while a pass runs, until ctx ends (churn), and
	// returns how many requests to the resource it sent.
	during func(ctx context.Context) int
	env    *framework.Env
}

// strategy rewrites every object of a workload once.
type strategy struct {
	name string
	// prepare, if set, readies what the strategy needs that is not part of
	// its work (kube-controller-manager, started and synced), before the
	// pass waits for a quiet server and is timed. The cleanup it returns
	// runs once the pass is measured and verified, and may add to the
	// pass's figures; prefix is where the workload's objects are in etcd.
	prepare func(b *testing.B, w *workload) (cleanup func(b *testing.B, prefix string, u *usage))
	// run rewrites w's objects; it returns the rewriting process's CPU
	// time and peak RSS when it ran as a process (svm, or
	// kube-controller-manager), zero otherwise, and how many objects it
	// found already rewritten by someone else.
	run func(ctx context.Context, w *workload) (usage, error)
}

type usage struct {
	cpu     time.Duration
	peakRSS int64 // bytes
	skipped int
	// counted says skipped was read from svm's summary: the in-tree
	// migrator reports no counts.
	counted bool
	process bool
	// inTree is set by the in-tree migrator's passes.
	inTree *inTreeFigures
}

// defaultsName names svm at its defaults: --workers 64, adaptive pacing.
const defaultsName = "svm (defaults)"

// maxSettings are svm's largest settings: as many workers as the ceiling
// search tries at most. Adaptive pacing, on by default, then decides how
// many writes are really in flight: as many as keep svm's answers fast.
var maxSettings = []string{"--workers", "256"}

const maxSettingsName = "svm (max, paced: --workers 256)"

// unthrottled are the largest settings with nothing holding svm back:
// adaptive pacing off, no --qps. svm at full speed.
var unthrottled = append(slices.Clone(maxSettings), "--adaptive-pacing=false")

const unthrottledName = "svm (unthrottled: --workers 256 --adaptive-pacing=false)"

// BenchmarkSuite measures, in one run and on the same data, svm (defaults,
// largest settings paced, and unthrottled, as the `svm` process an
// operator runs), the naive baseline (full list and unmodified Update, 1
// and 8 workers), the ceiling (the highest rate the API server sustains:
// svm's engine in its process, unpaced at rising concurrency) and kube-controller-manager's
// in-tree migrator, on custom resources after a storage flip and Secrets
// after an encryption key rotation, and svm and the naive baseline on
// custom resources being updated during the migration. Every pass is
// verified in etcd. The compared strategies run SVM_BENCH_ROUNDS times
// (default 3), interleaved, and the table shows medians. The table goes
// to $SVM_BENCH_RESULTS (default _output/benchmarks.md at the repository
// root). Run it with `make bench`; SVM_BENCH_OBJECTS sets the size
// (default 10000) and SVM_BENCH_LARGE the size of the largest pass of the
// scaling series (default 100000, 0 skips the series); SVM_BENCH_ONLY, a
// regular expression, keeps only the strategies whose names match it;
// SVM_BENCH_FIXED_WORKERS (such as 16,32,64) adds svm at those workers
// with adaptive pacing off to the comparisons of custom-resources and
// secrets; SVM_BENCH_PRICE_OBJECTS sets the size of the two price parts
// (default 3000 at fixed rates, priceAtRateObjects at one rate).
//
// The targets table judges every target from this run's figures alone:
// the compared workloads' (speedTargets) from the medians of the rounds,
// the price at one rate (priceTarget) from the reads of all its rounds
// pooled. A target that needs a strategy or part that did not run says
// "not run" and what, and the price on fewer than minPriceReads reads a
// side says "not enough reads", instead of whether it was met.
func BenchmarkSuite(b *testing.B) {
	n := envInt("SVM_BENCH_OBJECTS", 10000)
	rounds := envInt("SVM_BENCH_ROUNDS", 3)
	svmBinary = framework.SVMBinary(b)
	large := envIntOrZero("SVM_BENCH_LARGE", 100000)
	var results []result
	var notes []string
	var targets []target
	// compared are the workloads on which every strategy was compared
	// (those of them SVM_BENCH_ONLY keeps), judged by speedTargets.
	var compared []string

	b.Run("custom-resources", func(b *testing.B) {
		env := framework.Start(b, benchControlPlane())
		env.CreateWidgetCRD(b, "v1")
		w := widgetsWorkload(b, env, "custom resources after a storage flip", n)
		results = append(results, runAll(b, w, rounds, inTree(),
			refMigrator(refShippedName, refShippedFlags...), refMigrator(refUnlimitedName, refUnlimitedFlags...))...)
		compared = append(compared, w.name)
	})
	b.Run("secrets", func(b *testing.B) {
		results = append(results, secretsSuite(b, n, rounds)...)
		compared = append(compared, secretsName)
	})
	b.Run("churn", func(b *testing.B) {
		env := framework.Start(b, benchControlPlane())
		env.CreateWidgetCRD(b, "v1")
		w := widgetsWorkload(b, env, "custom resources updated during the migration (100/s)", n)
		w.during = churn(env, n, 100)
		rs := compare(b, w, 1, svmProcess(defaultsName), naive(8))
		results = append(results, rs...)
		svm := rs[0]
		targets = append(targets, target{
			what: "objects rewritten by others after the checkpoint cost no write",
			measured: fmt.Sprintf("%d objects updated at 100/s during the migration; svm found %d of them written since it started and sent them no write (%.3f requests per object)",
				svm.passes[0].churned, svm.skipped(), svm.requestsPerObject()),
			met: svm.skipped() > 0,
		})
	})
	if large > 0 {
		// The scaling series: svm at its defaults on ever more objects,
		// with the API server's CPU and memory.
		var series []result
		for _, size := range slices.Compact([]int{n, min(large, 50000), large}) {
			b.Run(fmt.Sprintf("scaling-%d", size), func(b *testing.B) {
				env := framework.Start(b, benchControlPlane())
				env.CreateWidgetCRD(b, "v1")
				w := widgetsWorkload(b, env, fmt.Sprintf("custom resources, %d (scaling)", size), size)
				r := pass(b, w, svmProcess(defaultsName))
				results = append(results, r)
				series = append(series, r)
			})
		}
		if len(series) >= 2 {
			first, last := series[0], series[len(series)-1]
			ratio := float64(last.peakRSS()) / float64(first.peakRSS())
			targets = append(targets, target{
				what:     fmt.Sprintf("flat memory: svm's peak RSS at %d objects within 1.2x of %d, and under 100 MB", last.objects, first.objects),
				measured: fmt.Sprintf("%.0f MB / %.0f MB = %.2f", float64(last.peakRSS())/1e6, float64(first.peakRSS())/1e6, ratio),
				met:      ratio <= 1.2 && last.peakRSS() < 100e6,
			})
			notes = append(notes, scalingNote(series))
		}
	}
	b.Run("priority-and-fairness", func(b *testing.B) {
		r, note, t := apfSuite(b, n)
		results = append(results, r)
		notes = append(notes, note)
		targets = append(targets, t)
	})
	b.Run("price-to-another-client", func(b *testing.B) {
		rs, note := apfPrice(b, envInt("SVM_BENCH_PRICE_OBJECTS", 3000))
		results = append(results, rs...)
		notes = append(notes, note)
	})
	var price *atRatePrice // nil unless price-at-one-rate runs
	b.Run("price-at-one-rate", func(b *testing.B) {
		rs, note, p := equalRatePrice(b, envInt("SVM_BENCH_PRICE_OBJECTS", priceAtRateObjects), rounds)
		results = append(results, rs...)
		notes = append(notes, note)
		price = p
	})
	targets = append(targets, priceTarget(price))
	b.Run("qps", func(b *testing.B) {
		env := framework.Start(b, benchControlPlane())
		env.CreateWidgetCRD(b, "v1")
		w := widgetsWorkload(b, env, "custom resources, --qps 10", 300)
		r := pass(b, w, svmProcess("svm --qps 10", "--qps", "10"))
		results = append(results, r)
		p := r.passes[0]
		off := 100 * (r.requestRate() - 10) / 10
		targets = append(targets, target{
			what:     "`--qps 10`: the write rate within 5% of 10 per second",
			measured: fmt.Sprintf("%d requests to the resource in %s: %.2f per second, %+.1f%%", p.requests, p.wall.Round(time.Millisecond), r.requestRate(), off),
			met:      off >= -5 && off <= 5,
		})
	})
	notes = append(notes, inTreeNotes(results)...)
	writeResults(b, results, notes, append(speedTargets(results, compared), targets...))
}

// ceilingLevels are the concurrencies at which the ceiling is sought: the
// rate of svm's rewrite grows with concurrency on these servers (they
// batch work better) and the best of these is the ceiling.
var ceilingLevels = []int{16, 64, 256}

// ceilingName names the ceiling search at one concurrency.
func ceilingName(workers int) string {
	return fmt.Sprintf("ceiling search: svm's engine in the benchmark's process, unpaced, %d workers", workers)
}

// runAll runs the comparison on w, in rounds: the ceiling search (svm's
// engine in this process, unpaced at rising concurrency),
// svm and the naive baseline, and then others (the in-tree migrator). One
// unmeasured pass warms the server up first: the first pass after the
// objects were made is the slowest of any.
func runAll(b *testing.B, w *workload, rounds int, others ...strategy) []result {
	pass(b, w, engine(64))
	var strategies []strategy
	for _, workers := range ceilingLevels {
		s := engine(workers)
		s.name = ceilingName(workers)
		strategies = append(strategies, s)
	}
	strategies = append(strategies, svmProcess(defaultsName), svmProcess(maxSettingsName, maxSettings...),
		svmProcess(unthrottledName, unthrottled...))
	// svm's own process at fixed windows: the rate curve the pacer reads,
	// as an operator who turns it off would get it.
	for _, workers := range envRising(b, "SVM_BENCH_FIXED_WORKERS", nil, "numbers of workers, such as 16,32,64") {
		strategies = append(strategies, svmProcess(fmt.Sprintf("svm (fixed: --workers %d --adaptive-pacing=false)", workers),
			"--workers", strconv.Itoa(workers), "--adaptive-pacing=false"))
	}
	strategies = append(strategies, naive(1), naive(8))
	return compare(b, w, rounds, append(strategies, others...)...)
}

// compare runs every strategy on w rounds times, one after another in
// each round, so that a machine that drifts (a noisy neighbour, a server
// whose heap grew) hits them all alike. Every other round runs them in
// reverse order (see inTurn).
func compare(b *testing.B, w *workload, rounds int, strategies ...strategy) []result {
	strategies = onlyNamed(b, strategies, func(s strategy) string { return s.name })
	out := make([]result, len(strategies))
	for round := range rounds {
		for _, i := range inTurn(len(strategies), round) {
			r := pass(b, w, strategies[i])
			out[i].workload, out[i].strategy, out[i].objects = r.workload, r.strategy, r.objects
			out[i].passes = append(out[i].passes, r.passes...)
		}
	}
	return out
}

// inTurn is the order in which n strategies run in a round: as listed in
// even rounds, reversed in odd ones. Each pass flips the storage version
// back and forth, so a fixed order would have, for an even n, every
// strategy migrate in the same direction in every round (v1 to v2, say,
// which converts once more per write than v2 to v1), and the first of a
// round always follow the same one. Reversed, each changes direction
// from round to round, whatever n.
func inTurn(n, round int) []int {
	order := make([]int, n)
	for i := range order {
		order[i] = i
		if round%2 == 1 {
			order[i] = n - 1 - i
		}
	}
	return order
}

// onlyNamed keeps the items whose name SVM_BENCH_ONLY matches, all of them
// when it is unset.
func onlyNamed[T any](b *testing.B, items []T, name func(T) string) []T {
	only := os.Getenv("SVM_BENCH_ONLY")
	if only == "" {
		return items
	}
	re, err := regexp.Compile(only)
	if err != nil {
		b.Fatalf("SVM_BENCH_ONLY: %v", err)
	}
	return slices.DeleteFunc(slices.Clone(items), func(item T) bool { return !re.MatchString(name(item)) })
}

// benchControlPlane is a control plane whose API server never compacts
// etcd by itself (pass does, before every pass), so that no pass pays for a
// compaction another did not: on two shared cores, one that lands in the
// middle of a pass slows it down by several per cent.
func benchControlPlane(apiServerFlags ...string) controlplane.Options {
	return controlplane.Options{
		APIServerFlags: append(apiServerFlags, "--etcd-compaction-interval=0"),
		// etcd's default quota, 2 GiB, is its database file, free pages
		// included: a million Secrets written twice come near it.
		EtcdFlags: []string{"--quota-backend-bytes=8589934592"},
		// An API server restarted over a million objects fills its watch
		// cache before it is ready: over a minute on two shared cores.
		StartTimeout: 10 * time.Minute,
	}
}

// settleLimit bounds the wait for a quiet API server around a pass.
const settleLimit = time.Minute

// pass makes w's objects stale, compacts etcd, runs s, and verifies etcd.
func pass(b *testing.B, w *workload, s strategy) result {
	b.Helper()
	prefix, want := w.stale(b)
	w.env.CompactEtcd(b)
	var cleanup func(b *testing.B, prefix string, u *usage)
	if s.prepare != nil {
		cleanup = s.prepare(b, w)
	} else if w.env.CP.ControllerManagerRunning() {
		// Its garbage collector would process every write of the pass.
		b.Fatalf("kube-controller-manager is running during %s", s.name)
	}
	pid := w.env.CP.APIServerPID()
	// Every pass starts on a quiet server: what the last pass and the
	// storage flip left to do would otherwise slow this one's start by a
	// varying amount, and be counted as idle.
	waited, err := settle(pid, settleLimit)
	if err != nil {
		b.Fatal(err)
	}
	if waited >= settleLimit {
		b.Logf("the API server was still busy after %s; measuring anyway", settleLimit)
	}
	meter, err := newCPUMeter(pid, 2*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	before := requests(b, w)
	ctx, cancel := context.WithTimeout(b.Context(), 2*time.Hour)
	defer cancel()
	churnCtx, stopChurn := context.WithCancel(ctx)
	var churning sync.WaitGroup
	churned := 0
	if w.during != nil {
		churning.Go(func() { churned = w.during(churnCtx) })
	}
	// The API server's resident memory is sampled through the pass and
	// until it is quiet after it.
	rssCtx, stopRSS := context.WithCancel(ctx)
	var serverRSS atomic.Int64
	var sampling sync.WaitGroup
	sampling.Go(func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			serverRSS.Store(max(serverRSS.Load(), vmRSS(pid)))
			select {
			case <-rssCtx.Done():
				return
			case <-tick.C:
			}
		}
	})
	if err := meter.start(); err != nil {
		b.Fatal(err)
	}
	u, err := s.run(ctx, w)
	wall := time.Since(meter.startWall)
	stopChurn()
	churning.Wait()
	if err != nil {
		b.Fatalf("%s on %s: %v", s.name, w.name, err)
	}
	// The server's CPU for the pass includes the work it finishes after the
	// last answer (its watch cache decoding the last writes).
	tail, err := settle(pid, settleLimit)
	if err != nil {
		b.Fatal(err)
	}
	busy, err := meter.stop()
	if err != nil {
		b.Fatal(err)
	}
	stopRSS()
	sampling.Wait()
	if got := w.env.StoredVersions(b, prefix); !equalCounts(got, want) {
		b.Fatalf("after %s on %s: etcd holds %v, want %v", s.name, w.name, got, want)
	}
	requested := requests(b, w) - before - churned
	if cleanup != nil {
		cleanup(b, prefix, &u)
	}
	p := passFigures{wall: wall, serverCPU: busy, serverRSS: serverRSS.Load(), usage: u, requests: requested, churned: churned}
	r := result{workload: w.name, strategy: s.name, objects: w.objects, passes: []passFigures{p}}
	migrator := ""
	if u.process {
		migrator = fmt.Sprintf("  migrator %.3f ms/object, peak RSS %.0f MB", ms(u.cpu)/float64(w.objects), float64(u.peakRSS)/1e6)
	}
	b.Logf("%-45s %-55s %8.0f objects/s  server %.2f ms/object  %d requests%s  (settled %.0fs before, %.0fs after; idle %.3f cores)",
		w.name, s.name, r.rate(), ms(busy)/float64(w.objects), p.requests, migrator, waited.Seconds(), tail.Seconds(), meter.idleRate)
	return r
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// requests counts the API server's LIST, PATCH and PUT requests to w's
// resource so far.
func requests(b *testing.B, w *workload) int {
	total := 0
	for _, verb := range []string{"LIST", "PATCH", "PUT"} {
		total += w.env.ServerRequests(b, verb, w.resource.Resource)
	}
	return total
}

func widgetsWorkload(b *testing.B, env *framework.Env, name string, n int) *workload {
	b.Helper()
	namespaces := []string{"bench-a", "bench-b", "bench-c", "bench-d"}
	stored := storageVersionOf(b, env)
	env.SeedWidgets(b, stored, namespaces, n)
	prefix := framework.EtcdPrefix(framework.Widgets.GroupResource())
	return &workload{
		name: name, resource: framework.Widgets, svmName: framework.WidgetsCRDName, objects: n, env: env,
		stale: func(b *testing.B) (string, map[string]int) {
			from := storageVersionOf(b, env)
			to := map[string]string{"v1": "v2", "v2": "v1"}[from]
			flipWidgetsStorage(b, env, to)
			if got := env.StoredVersions(b, prefix); got["example.com/"+from] != n {
				b.Fatalf("before the pass: etcd holds %v, want all %d in %s", got, n, from)
			}
			return prefix, map[string]int{"example.com/" + to: n}
		},
	}
}

// flipWidgetsStorage makes version the widgets' storage version and waits
// until discovery says so. The server builds the resource's new storage,
// and fills its watch cache, at the first request after the flip: the flip
// makes that request, so that a pass after it measures the rewrite alone.
func flipWidgetsStorage(b *testing.B, env *framework.Env, version string) {
	b.Helper()
	hash := env.StorageVersionHash(b, framework.Widgets)
	env.SetCRDStorageVersion(b, framework.WidgetsCRDName, version)
	env.WaitStorageVersionHashChange(b, framework.Widgets, hash)
	if _, err := env.Dynamic.Resource(framework.Widgets).List(b.Context(), metav1.ListOptions{Limit: 1}); err != nil {
		b.Fatalf("list after the flip: %v", err)
	}
}

// secretsName names the secrets part's workload.
const secretsName = "Secrets after an encryption key rotation"

// priceAtRateObjects is price-at-one-rate's size unless
// SVM_BENCH_PRICE_OBJECTS sets it: at the in-tree migrator's rate on these
// machines (95 to 165 objects/s while writing), the client reads 1,200 to
// 2,100 times a round beside each migrator, over minPriceReads a side in 3
// rounds.
const priceAtRateObjects = 10000

// secretsSuite rotates the encryption key before every pass: the new key
// first (writing), the old one second (reading).
func secretsSuite(b *testing.B, n, rounds int) []result {
	w, _ := rotatedSecrets(b, secretsName)
	createSecrets(b, w.env, n)
	w.objects = n
	return runAll(b, w, rounds, inTree())
}

// rotatedSecrets starts a control plane that encrypts Secrets, and returns
// the workload of the Secrets in namespace bench, made stale by a key
// rotation (the API server restarted with the other of two keys writing,
// the current one reading), and the key the API server writes them with.
// The caller creates them and sets w.objects.
func rotatedSecrets(b *testing.B, name string) (w *workload, writing func() framework.EncryptionKey) {
	dir := b.TempDir()
	keys := []framework.EncryptionKey{framework.NewEncryptionKey(b, "key-a"), framework.NewEncryptionKey(b, "key-b")}
	env := framework.Start(b, benchControlPlane(framework.WriteEncryptionConfig(b, dir, keys[0])))
	env.CreateNamespace(b, "bench")
	current := 0
	w = &workload{
		name: name, resource: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, svmName: "secrets", env: env,
	}
	w.stale = func(b *testing.B) (string, map[string]int) {
		next := 1 - current
		env.CP.SetAPIServerFlags(benchControlPlane(framework.WriteEncryptionConfig(b, dir, keys[next], keys[current])).APIServerFlags...)
		if err := env.CP.RestartAPIServer(framework.Context(b, 10*time.Minute)); err != nil {
			b.Fatal(err)
		}
		current = next
		return "/registry/secrets/bench/", map[string]int{"encrypted:aescbc:" + keys[current].Name: w.objects}
	}
	return w, func() framework.EncryptionKey { return keys[current] }
}

func createSecrets(b *testing.B, env *framework.Env, n int) {
	b.Helper()
	ctx := framework.Context(b, 10*time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for worker := range 16 {
		wg.Go(func() {
			for i := worker; i < n; i += 16 {
				s := map[string]any{
					"apiVersion": "v1", "kind": "Secret",
					"metadata": map[string]any{"name": fmt.Sprintf("secret-%05d", i)},
					"data":     map[string]any{"value": "c2VjcmV0"},
				}
				if _, err := env.Dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}).Namespace("bench").
					Create(ctx, unstructuredOf(s), metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatalf("create secrets: %v", err)
	}
}

// churn updates random widgets at rate per second until ctx ends, as
// controllers and users do while a migration runs.
func churn(env *framework.Env, n, rate int) func(ctx context.Context) int {
	return func(ctx context.Context) int {
		client := dynamic.NewForConfigOrDie(env.Config).Resource(framework.Widgets)
		namespaces := []string{"bench-a", "bench-b", "bench-c", "bench-d"}
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		var seq atomic.Int64
		for {
			select {
			case <-ctx.Done():
				return int(seq.Load())
			case <-tick.C:
			}
			i := rand.IntN(n)
			patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"bench/churn":"%d"}}}`, seq.Add(1))
			// The server counts a request cut short by the pass's end too.
			_, _ = client.Namespace(namespaces[i%len(namespaces)]).Patch(context.WithoutCancel(ctx), fmt.Sprintf("widget-%05d", i), types.MergePatchType, patch, metav1.PatchOptions{})
		}
	}
}

// svmProcess runs `svm migrate` as the operator would, and reads its CPU
// time and peak RSS from the kernel when it exits.
func svmProcess(name string, args ...string) strategy { return svmProcessAs(name, "", args...) }

// svmProcessAs runs svm with the credentials of kubeconfig, the admin's
// when empty.
func svmProcessAs(name, kubeconfig string, args ...string) strategy {
	return svmBuildAs("", name, kubeconfig, args...)
}

// svmBuildAs runs the svm binary at path (the one built for the run when
// empty) with the credentials of kubeconfig, the admin's when empty: a
// build of an earlier commit measures what a change bought, in the same
// rounds as the change.
func svmBuildAs(binary, name, kubeconfig string, args ...string) strategy {
	s := strategy{name: name}
	// Words env:NAME=VALUE are svm's environment, not its flags.
	var environ []string
	args = slices.DeleteFunc(slices.Clone(args), func(a string) bool {
		v, ok := strings.CutPrefix(a, "env:")
		if ok {
			environ = append(environ, v)
		}
		return ok
	})
	s.run = func(ctx context.Context, w *workload) (usage, error) {
		binary := cmp.Or(binary, svmBinary)
		path := kubeconfig
		if path == "" {
			path = filepath.Join(os.TempDir(), fmt.Sprintf("svm-bench-%d.kubeconfig", os.Getpid()))
			if err := w.env.CP.WriteKubeconfig(path); err != nil {
				return usage{}, err
			}
			defer os.Remove(path)
		}
		cmd := exec.CommandContext(ctx, binary, append([]string{"migrate", w.svmName, "--kubeconfig", path}, args...)...)
		cmd.Env = append(os.Environ(), environ...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			return usage{}, err
		}
		// The kernel's maxrss of a child counts the parent's memory it
		// shared between fork and exec: the peak is read from the
		// process itself instead (VmHWM, reset by exec), until it exits.
		var peak atomic.Int64
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			for {
				if hwm := vmHWM(cmd.Process.Pid); hwm > 0 {
					peak.Store(max(peak.Load(), hwm))
				} else if peak.Load() > 0 {
					return // exited
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		err := cmd.Wait()
		<-watched
		if err != nil {
			return usage{}, fmt.Errorf("svm migrate: %w\n%s", err, out.String())
		}
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		u := usage{
			cpu:     time.Duration(ru.Utime.Nano() + ru.Stime.Nano()),
			peakRSS: peak.Load(),
			counted: true,
			process: true,
		}
		// The summary: "<resource>: rewritten R, skipped S, failed F in T",
		// then, when S > 0, how many of them cost no write.
		const noWrite = "skipped without a write (written or deleted since the start): "
		if i := strings.LastIndex(out.String(), noWrite); i >= 0 {
			fmt.Sscanf(out.String()[i+len(noWrite):], "%d", &u.skipped)
		}
		return u, nil
	}
	return s
}

// svmBinary is built once per run.
var svmBinary string

// engine is svm's rewrite (a whole-object list, an Update of each object
// as listed) in this process, with client limits off: the ceiling
// search.
func engine(workers int) strategy {
	return strategy{name: fmt.Sprintf("engine, %d workers", workers), run: func(ctx context.Context, w *workload) (usage, error) {
		return usage{}, svmEngineFor(workers, w.resource)(ctx, unlimited(w.env.Config))
	}}
}

// naive is the baseline: full list and an unmodified Update per object.
func naive(workers int) strategy {
	return strategy{name: fmt.Sprintf("naive: full list + Update, %d worker(s)", workers), run: func(ctx context.Context, w *workload) (usage, error) {
		return usage{}, fullUpdateFor(workers, w.resource)(ctx, unlimited(w.env.Config))
	}}
}

func unlimited(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	return cfg
}

func storageVersionOf(b *testing.B, env *framework.Env) string {
	b.Helper()
	for _, v := range []string{"v1", "v2"} {
		if env.StorageVersionHash(b, framework.Widgets) == resourcesHash(v) {
			return v
		}
	}
	b.Fatal("widgets are stored in neither v1 nor v2")
	return ""
}

func envIntOrZero(name string, def int) int {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def
	}
	var n int
	if _, err := fmt.Sscanf(v, "%d", &n); err != nil || n < 0 {
		return def
	}
	return n
}

// envRising reads a comma-separated list of rising positive numbers from
// name, def when it is not set; want says what they are, for the error.
func envRising(b *testing.B, name string, def []int, want string) []int {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def
	}
	var sizes []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || (len(sizes) > 0 && n <= sizes[len(sizes)-1]) {
			b.Fatalf("%s=%q: want rising %s", name, v, want)
		}
		sizes = append(sizes, n)
	}
	return sizes
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func resourcesHash(version string) string {
	return resources.StorageVersionHash(framework.Widgets.Group, version, "Widget")
}

func unstructuredOf(obj map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: obj}
}

// vmHWM is the peak resident set of process pid in bytes, 0 once it is gone.
func vmHWM(pid int) int64 { return framework.PeakRSS(pid) }

// vmRSS is the resident set of process pid in bytes, 0 once it is gone.
func vmRSS(pid int) int64 { return framework.RSS(pid) }
