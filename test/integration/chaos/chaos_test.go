// Package chaos_test breaks what a running migration depends on (the svm
// controller, kube-apiserver, etcd) at random points while 20,000 custom
// resources are migrated (5,000 where one outage is all a scenario needs),
// and checks that each migration then completes by itself: Succeeded,
// every value in etcd in the target version, every object's content
// unchanged, and the writes within a stated bound.
//
// The random choices come from one seed, logged at the start; set
// SVM_CHAOS_SEED to replay them.
package chaos_test

import (
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

const (
	// manyObjects are migrated while svm is killed five times: enough
	// chunks for five kill points apart from each other. One outage of the
	// API server or etcd in the middle of a migration needs fewer.
	manyObjects = 20000
	fewObjects  = 5000
	// chunkSize makes 100 chunks of manyObjects: small enough that a kill
	// at a random moment may land inside a chunk or between two, large
	// enough that listing is a small part of the work.
	chunkSize = 200
	// workers and attempts are svm's defaults (--workers, and the engine's
	// retries of a transient error): together they bound how often writes
	// in flight can be repeated while a server is away.
	workers  = 8
	attempts = 10
	// A migration must keep moving: every wait for its progress or end
	// fails once its saved progress has stood still for stall (a chunk of
	// 200 objects, or a restart and its retries, takes far less), or
	// after limit in all. On two cores shared with other suites (the
	// scenarios' own among them: they run side by side), 20,000 writes
	// have taken from two to over eight minutes: the API server answers
	// slowly, and svm's pacing then sends fewer writes at once, as it
	// should. A fixed deadline would fail a migration for being slow.
	stall = 4 * time.Minute
	limit = 20 * time.Minute
	// retries is svm's counter of requests repeated after a transient error.
	retries = "storage_migrator_core_migrator_retries_total"
)

var (
	widgetsPrefix = framework.EtcdPrefix(framework.Widgets.GroupResource())
	namespaces    = []string{"ns-a", "ns-b", "ns-c", "ns-d"}
)

// TestChaos runs the scenarios side by side, each on a control plane of its
// own with its own widgets and its own snapshot of them: each breaks
// its control plane (or the svm controller, which acts on every migration in
// the cluster) on purpose, and each counts every write to widgets. Seeding
// goes straight into etcd and takes seconds, and much of a scenario's time
// is spent waiting (on a kill point, an outage, a restart), so side by side
// they take little longer than the slowest alone.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos suite takes minutes; run it without -short: go test ./test/integration/chaos/")
	}
	seed := framework.ChaosSeed(t)
	for _, s := range []struct {
		name    string
		objects int
		run     func(*testing.T, *framework.Env, framework.Snapshot, *rand.Rand)
	}{
		{"svm-killed", manyObjects, svmKilledRepeatedly},
		{"kube-apiserver-killed", fewObjects, apiServerKilled},
		{"etcd-stopped", fewObjects, etcdStopped},
	} {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			env, before := seeded(t, s.objects)
			s.run(t, env, before, framework.ChaosRand(seed, s.name))
		})
	}
}

// seeded starts a control plane for one scenario with svm's CRDs and
// objects widgets stored in v1, and returns it with a snapshot of them: a
// scenario's number of objects is the length of its snapshot.
func seeded(t *testing.T, objects int) (*framework.Env, framework.Snapshot) {
	t.Helper()
	env := framework.Start(t, controlplane.Options{})
	env.InstallCRDs(t, framework.CRDBasesDir())
	env.CreateWidgetCRD(t, "v1")
	env.SeedWidgets(t, "v1", namespaces, objects)
	before := env.TakeSnapshotInPages(t, framework.Widgets)
	if len(before) != objects {
		t.Fatalf("%d widgets, want %d", len(before), objects)
	}
	return env, before
}

// svmKilledRepeatedly kills `svm controller` with SIGKILL five times at
// random points of one migration, starting it again each time.
func svmKilledRepeatedly(t *testing.T, env *framework.Env, before framework.Snapshot, rnd *rand.Rand) {
	const kills, qps = 5, 500
	objects := len(before)
	want := flip(t, env, objects)
	writesBefore := env.ServerWrites(t, "widgets")

	// Each kill comes after a random number of saved chunks (at least
	// three apart, all before the last quarter), then after a random delay
	// of up to two chunks' time, so that it lands anywhere in the chunks
	// that follow: while listing, inside a chunk's writes, between the
	// last write and the save. One kill, chosen at random, lands instead
	// while the progress of a finished chunk is being saved, which the
	// moment of a random kill would hardly ever hit: the proxy holds the
	// save until svm is dead.
	chunks := objects / chunkSize
	points := rnd.Perm(chunks*3/4 - 2*(kills-1))[:kills]
	slices.Sort(points)
	chunkTime := time.Second * chunkSize / qps
	delays := make([]time.Duration, kills)
	for i := range delays {
		delays[i] = upTo(rnd, 2*chunkTime)
	}
	duringSave := rnd.IntN(kills)
	for i := range points {
		points[i] += 1 + 2*i
	}
	t.Logf("kill plan: after %v saved chunks, with delays %v, except kill %d, during the save of a chunk", points, delays, duringSave+1)

	proxy := quietProxy(t, env)
	saves := holdSaves(proxy, "svm-killed")
	args := func(metricsAddr string) []string {
		// Without leader election: a controller killed with SIGKILL never
		// releases its lease, and its successor would wait out the lease
		// (15s) five times. Taking over an expired lease is shown by
		// TestTwoReplicasBecomeReady; resuming from the saved state is the
		// same code with or without it.
		return controllerArgs(metricsAddr, "--leader-elect=false", "--qps", strconv.Itoa(qps))
	}
	env.CreateMigration(t, "svm-killed", framework.Widgets)
	retried, wasted, saved := 0, 0, 0
	for i, point := range points {
		metricsAddr := framework.FreeAddress(t)
		svm := proxy.StartSVM(t, args(metricsAddr)...)
		// Each run saves at least one chunk of its own before it is
		// killed, whatever the previous run managed after its kill point.
		target := max(point*chunkSize, saved+chunkSize)
		env.WaitMigrationMoving(t, "svm-killed", stall, limit, fmt.Sprintf("past %d listed objects", target), listed(target))
		// Retries are counted by each process, and are lost with it.
		scrape := func() {
			retried += int(framework.Scrape(t, metricsAddr).Sum(retries, "resource", "widgets.example.com"))
		}
		when := delays[i].String() + " after"
		if i == duringSave {
			when = "while saving the chunk after"
			release := saves.holdNext(t)
			scrape()
			svm.Kill()
			release()
		} else {
			time.Sleep(delays[i])
			scrape()
			svm.Kill()
		}

		m := env.GetMigration(t, "svm-killed")
		if framework.Finished(m) {
			t.Fatalf("kill %d: the migration had finished (%+v); the kill proves nothing", i+1, m.Status.Conditions)
		}
		// Nobody else writes widgets, so every write svm made is counted
		// in the saved progress as rewritten or (a repeat, answered 409)
		// skipped, unless its chunk had not been saved when svm died.
		writes := env.ServerWrites(t, "widgets") - writesBefore
		unsaved := writes - int(m.Status.Progress.Migrated()+m.Status.Progress.Skipped()) - wasted
		wasted += unsaved
		saved = int(m.Status.Progress.Listed)
		t.Logf("kill %d: %s %d saved objects; %d saved at the kill, %d writes so far, %d of them unsaved",
			i+1, when, target, saved, writes, unsaved)
	}

	metricsAddr := framework.FreeAddress(t)
	proxy.StartSVM(t, args(metricsAddr)...)
	m := env.WaitMigrationMoving(t, "svm-killed", stall, limit, "finished", framework.Finished)
	retried += int(framework.Scrape(t, metricsAddr).Sum(retries, "resource", "widgets.example.com"))
	writes := env.ServerWrites(t, "widgets") - writesBefore
	// A run resumes from the last saved continue token: at most the chunk
	// in flight at a kill is listed and written again (its rewritten
	// objects answer 409), and nothing here fails transiently.
	bound := objects + kills*chunkSize
	verify(t, env, framework.Scenario{Name: "svm killed 5x (SIGKILL)", Writes: writes, Retries: retried}, m, before, want, bound)
}

// saveHolder makes the proxy hold svm's writes to a migration's status.
type saveHolder struct {
	path  string
	mu    sync.Mutex
	held  chan struct{} // closed when a save is held; nil when none is wanted
	until chan struct{} // closed to let the held save go
}

// holdSaves lets the test hold, one at a time, the status writes of the
// migration name that pass through proxy.
func holdSaves(proxy *framework.Proxy, name string) *saveHolder {
	h := &saveHolder{path: "/apis/migration.k8s.io/v1alpha1/storageversionmigrations/" + name + "/status"}
	proxy.Intercept(func(r *http.Request) (int, http.Header, bool) {
		if r.Method != http.MethodPatch || r.URL.Path != h.path {
			return 0, nil, false
		}
		h.mu.Lock()
		held, until := h.held, h.until
		h.held = nil
		h.mu.Unlock()
		if held == nil {
			return 0, nil, false
		}
		close(held)
		<-until
		// The client is dead by now; the API server never sees the save.
		return http.StatusServiceUnavailable, nil, true
	})
	return h
}

// holdNext waits until svm's next status write to the migration reaches the
// proxy and holds it there (the proxy forwards nothing else meanwhile). The
// returned function answers it with 503, which only a dead client gets.
func (h *saveHolder) holdNext(t *testing.T) (release func()) {
	t.Helper()
	held, until := make(chan struct{}), make(chan struct{})
	h.mu.Lock()
	h.held, h.until = held, until
	h.mu.Unlock()
	select {
	case <-held:
		return func() { close(until) }
	case <-time.After(stall):
		t.Fatalf("svm saved no progress within %s", stall)
		return nil
	}
}

// quiet counts the scenarios running with a quiet proxy: the standard
// logger is silenced while any of them runs, and only the last to end
// gives it back its output.
var quiet struct {
	sync.Mutex
	proxies int
}

// quietProxy starts a proxy to the API server for the scenario.
func quietProxy(t *testing.T, env *framework.Env) *framework.Proxy {
	t.Helper()
	proxy := env.StartProxy(t)
	// The proxy logs every request whose client or server went away: many
	// lines that say only what the test did on purpose. The logger is the
	// process's, shared by the scenarios running side by side.
	quiet.Lock()
	if quiet.proxies++; quiet.proxies == 1 {
		log.SetOutput(io.Discard)
	}
	quiet.Unlock()
	t.Cleanup(func() {
		quiet.Lock()
		if quiet.proxies--; quiet.proxies == 0 {
			log.SetOutput(os.Stderr)
		}
		quiet.Unlock()
	})
	return proxy
}

// apiServerKilled kills kube-apiserver with SIGKILL at a random point of a
// migration and starts it again after a random pause; svm keeps running.
func apiServerKilled(t *testing.T, env *framework.Env, before framework.Snapshot, rnd *rand.Rand) {
	const qps = 1000
	objects := len(before)
	want := flip(t, env, objects)
	point := breakPoint(rnd, objects)
	delay := upTo(rnd, 2*time.Second*chunkSize/qps)
	down := upTo(rnd, 3*time.Second)
	t.Logf("plan: kill kube-apiserver %s after %d saved objects, start it %s later", delay, point, down)

	// kube-apiserver's request counters start at zero when it restarts, so
	// svm talks to it through a proxy that counts what svm sends, including
	// the writes that found the server gone.
	proxy := quietProxy(t, env)
	metricsAddr := framework.FreeAddress(t)
	// Without leader election: a leader that cannot renew its lease for
	// 10s (which an API server restart may take) exits on purpose, so that
	// the kubelet restarts it; that path is the svm-killed scenario. Here
	// the same process must ride out the outage.
	svm := proxy.StartSVM(t, controllerArgs(metricsAddr, "--leader-elect=false", "--qps", strconv.Itoa(qps))...)
	env.CreateMigration(t, "apiserver-killed", framework.Widgets)
	env.WaitMigrationMoving(t, "apiserver-killed", stall, limit, fmt.Sprintf("past %d listed objects", point), listed(point))
	time.Sleep(delay)
	if err := env.CP.KillAPIServer(); err != nil {
		t.Fatalf("kill kube-apiserver: %v", err)
	}
	if atKill := (proxy.Requests("PUT", "widgets") + proxy.Requests("PATCH", "widgets")); atKill >= objects {
		t.Fatalf("%d writes before the kill: the migration was done and the kill proves nothing", atKill)
	} else {
		t.Logf("kube-apiserver killed after %d writes", atKill)
	}
	time.Sleep(down)
	start := time.Now()
	if err := env.CP.StartAPIServer(framework.Context(t, 3*time.Minute)); err != nil {
		t.Fatalf("start kube-apiserver again: %v", err)
	}
	t.Logf("kube-apiserver ready again %s after its start", time.Since(start).Round(time.Millisecond))

	m := env.WaitMigrationMoving(t, "apiserver-killed", stall, limit, "finished", framework.Finished)
	if !svm.Running() {
		t.Error("svm controller exited during the outage")
	}
	retried := int(framework.Scrape(t, metricsAddr).Sum(retries, "resource", "widgets.example.com"))
	// Each of the writes in flight when the server died is tried at most
	// `attempts` times by each worker; a chunk whose progress could not be
	// saved during the outage is listed and written once more (answered
	// 409) when the migration resumes.
	bound := objects + chunkSize + workers*attempts
	verify(t, env, framework.Scenario{Name: "kube-apiserver killed (SIGKILL)", Writes: (proxy.Requests("PUT", "widgets") + proxy.Requests("PATCH", "widgets")), Retries: retried}, m, before, want, bound)
}

// etcdStopped stops etcd at a random point of a migration and starts it
// again on the same data after a random pause; kube-apiserver and svm keep
// running.
func etcdStopped(t *testing.T, env *framework.Env, before framework.Snapshot, rnd *rand.Rand) {
	const qps = 1000
	objects := len(before)
	want := flip(t, env, objects)
	point := breakPoint(rnd, objects)
	delay := upTo(rnd, 2*time.Second*chunkSize/qps)
	down := 2*time.Second + upTo(rnd, 6*time.Second)
	t.Logf("plan: stop etcd %s after %d saved objects, start it %s later", delay, point, down)

	writesBefore := env.ServerWrites(t, "widgets")
	metricsAddr := framework.FreeAddress(t)
	// Without leader election, as with the API server killed: the lease
	// cannot be renewed without etcd either.
	svm := env.StartSVM(t, controllerArgs(metricsAddr, "--leader-elect=false", "--qps", strconv.Itoa(qps))...)
	env.CreateMigration(t, "etcd-stopped", framework.Widgets)
	env.WaitMigrationMoving(t, "etcd-stopped", stall, limit, fmt.Sprintf("past %d listed objects", point), listed(point))
	time.Sleep(delay)
	if err := env.CP.StopEtcd(); err != nil {
		t.Fatalf("stop etcd: %v", err)
	}
	if atStop := env.ServerWrites(t, "widgets") - writesBefore; atStop >= objects {
		t.Fatalf("%d writes before etcd stopped: the migration was done and the outage proves nothing", atStop)
	} else {
		t.Logf("etcd stopped after %d writes", atStop)
	}
	time.Sleep(down)
	if err := env.CP.StartEtcd(framework.Context(t, 3*time.Minute)); err != nil {
		t.Fatalf("start etcd again: %v", err)
	}

	m := env.WaitMigrationMoving(t, "etcd-stopped", stall, limit, "finished", framework.Finished)
	if !svm.Running() || !env.CP.APIServerRunning() {
		t.Errorf("svm running: %v, kube-apiserver running: %v; both should have ridden out the outage", svm.Running(), env.CP.APIServerRunning())
	}
	retried := int(framework.Scrape(t, metricsAddr).Sum(retries, "resource", "widgets.example.com"))
	// As with the API server killed: writes waiting on etcd time out and are
	// repeated at most `attempts` times per worker, and a chunk whose save
	// failed is written once more.
	bound := objects + chunkSize + workers*attempts
	writes := env.ServerWrites(t, "widgets") - writesBefore
	verify(t, env, framework.Scenario{Name: "etcd stopped", Writes: writes, Retries: retried}, m, before, want, bound)
}

// flip makes the version of widgets that is not stored (v2, as seeded) the
// storage version, waits until discovery says so, and returns the stored
// versions a migration must leave.
func flip(t *testing.T, env *framework.Env, objects int) map[string]int {
	t.Helper()
	version := env.FlipStorage(t, framework.WidgetResource)
	t.Logf("storage version of widgets flipped to %s", version)
	return map[string]int{"example.com/" + version: objects}
}

// verify checks a scenario's outcome and reports its summary line: the
// migration succeeded with every object accounted for, etcd holds every
// value in the target version, no object's content changed, and the writes
// stayed within bound.
func verify(t *testing.T, env *framework.Env, s framework.Scenario, m *migrationv1alpha1.StorageVersionMigration, before framework.Snapshot, want map[string]int, bound int) {
	t.Helper()
	objects := len(before)
	s.Objects = objects
	if !framework.Succeeded(m) {
		t.Fatalf("migration ended without success: %+v", m.Status.Conditions)
	}
	if p := m.Status.Progress; p.Failed != 0 || p.Migrated()+p.Skipped() < int64(objects) || len(m.Status.FailedObjects) != 0 {
		t.Errorf("progress %+v, failed objects %v: want every object rewritten or skipped, none failed", p, m.Status.FailedObjects)
	}
	env.ExpectStored(t, widgetsPrefix, want)
	env.ExpectUnchangedInPages(t, framework.Widgets, before)
	if s.Writes > bound {
		t.Errorf("%d writes to widgets, want at most %d", s.Writes, bound)
	}
	s.Verified = !t.Failed()
	s.Report(t)
}

// controllerArgs run the migration controller alone (the tests create their
// migrations themselves) with its probes off and its metrics on
// metricsAddr.
func controllerArgs(metricsAddr string, extra ...string) []string {
	return append([]string{"controller", "--trigger=false", "--leader-election-namespace", "default",
		"--metrics-bind-address", metricsAddr, "--health-probe-bind-address", "0",
		"--chunk-size", strconv.Itoa(chunkSize), "--workers", strconv.Itoa(workers)}, extra...)
}

// listed holds once the migration has listed n objects, or has finished:
// a scenario that waits to break something at that point then sees at once
// that it came too late.
func listed(n int) func(*migrationv1alpha1.StorageVersionMigration) bool {
	return func(m *migrationv1alpha1.StorageVersionMigration) bool {
		return m.Status.Progress.Listed >= int64(n) || framework.Finished(m)
	}
}

// breakPoint is a random number of listed objects after which a scenario
// breaks a server: a chunk boundary in the middle half of the migration.
func breakPoint(rnd *rand.Rand, objects int) int {
	chunks := objects / chunkSize
	return chunkSize * (chunks/4 + rnd.IntN(chunks/2))
}

// upTo is a random duration in [0, d).
func upTo(rnd *rand.Rand, d time.Duration) time.Duration {
	return time.Duration(rnd.Int64N(int64(d)))
}
