package bench

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sync/errgroup"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/controller/history"
	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/internal/trigger"
	"github.com/svm-project/svm/test/framework"
)

// historyPlural is the resource of every CRD of the benchmark, each of
// its own group.
const historyPlural = "things"

// historyDeletedMetric counts the finished migrations svm controller's
// history limits deleted, by resource and status.
const historyDeletedMetric = "storage_migrator_history_deleted_migrations_total"

// historyFlatFactor is how much svm's RSS may grow from the second step
// of migrations to the last and still count as flat; the first step is
// left out, since it fills the caches and touches the code of every path.
const historyFlatFactor = 1.2

// historyReadKept is how many Succeeded migrations of a resource svm keeps
// beyond --succeeded-migrations-kept in this workload, where every one
// succeeds with nothing held, for one storage version hash: the newest
// that skipped no object written since a storage change, which the
// re-encryption reads (the newest per hash and the newest clean success
// are the newest of all, among those kept anyway).
const historyReadKept = 1

// historyRun is what BenchmarkMigrationHistory measured.
type historyRun struct {
	resources, migrations, batch, step int
	// firstSight is when every CRD was recorded migrated, from svm's
	// start; wall from the first migration created to the last one
	// finished; settled from then until the history met its bound (0:
	// not within the limit).
	firstSight, wall, settled time.Duration
	samples                   []historySample
	// end is svm and the API once the history met its bound.
	end historySample
	// Of the benchmark's migrations: how they ended, as the watch saw.
	succeeded, failed, gone int
	// Of every migration of the benchmark's resources, svm's first-sight
	// ones included: created, deleted (as the watch saw and as svm's
	// metric counts), left at the end, and the most left of one resource.
	created, deleted, remaining, mostOfOne int
	deletedMetric                          float64
	// unfinishedDeleted counts migrations deleted before they finished.
	unfinishedDeleted int
	peakRSS           int64
	cpu, serverCPU    time.Duration
	// requests are those the API server answered over the pass, by verb
	// and resource: where its CPU went.
	requests map[string]float64
}

// historySample is svm and the API at one count of finished migrations.
type historySample struct {
	finished int
	at       time.Duration
	// rss is VmRSS at the sample; peak and anon the highest VmRSS and
	// RssAnon sampled (every 100 ms) since the previous one.
	rss, peak, anon int64
	// inAPI counts the StorageVersionMigrations in the API, of every
	// resource; ofBench those of the benchmark's resources.
	inAPI, ofBench int
	deleted        float64
}

// BenchmarkMigrationHistory shows svm controller's history limits over a
// day's worth of storage changes, simulated: SVM_BENCH_HISTORY_MIGRATIONS
// StorageVersionMigrations (default 10000) of SVM_BENCH_HISTORY_RESOURCES
// CRDs (default 50, each of its own group, with one object), created
// round-robin over them as svm's trigger creates its own (its created-by
// label and annotations, so that the history may delete them), in batches
// of SVM_BENCH_HISTORY_BATCH (default 100), each batch created once the
// one before has finished. Real flips would cost svm's settle-and-drain
// wait each; svm's engine executes these migrations as it would those.
// svm controller runs at its defaults (GOMEMLIMIT and GOGC as the shipped chart
// sets them, its engine alone, no kube-controller-manager) and starts once
// the CRDs and objects exist; the pass starts after its first-sight
// migrations. svm's RSS and the migrations in the API are sampled every
// 1,000 finished (every fifth of the run when that is fewer than five
// samples); a watch of every migration sees how each ended, so every one
// of the benchmark's must have Succeeded. SVM_BENCH_HISTORY_TIMEOUT
// (minutes, default 60) bounds the pass. Run it with `make bench
// BENCH=BenchmarkMigrationHistory`.
func BenchmarkMigrationHistory(b *testing.B) {
	svmBinary = framework.SVMBinary(b)
	run := historyRun{
		resources:  envInt("SVM_BENCH_HISTORY_RESOURCES", 50),
		migrations: envInt("SVM_BENCH_HISTORY_MIGRATIONS", 10000),
		batch:      envInt("SVM_BENCH_HISTORY_BATCH", 100),
	}
	run.step = historyStep(run.migrations, run.batch)
	env := framework.Start(b, benchControlPlane())
	env.InstallCRDs(b, framework.CRDBasesDir())
	env.CreateNamespace(b, manyCRDsNamespace)
	rs := make([]framework.Resource, run.resources)
	for i := range rs {
		rs[i] = framework.Resource{Group: fmt.Sprintf("g%04d.history.example.com", i), Plural: historyPlural, Kind: "Thing"}
	}
	start := time.Now()
	createManyCRDs(b, env, rs)
	createManyObjects(b, env, rs, 1)
	b.Logf("%d CRDs with an object each created in %s", len(rs), time.Since(start).Round(time.Second))
	// The watch starts before svm, so that it sees every migration of
	// the benchmark's resources, svm's first-sight ones too.
	seen := watchMigrations(b, env)
	defer seen.stop()
	svm := startHistoryController(b, env)
	defer svm.stop()
	_, run.firstSight = waitFirstSight(b, env, rs, svm.started)
	waitMigrationsFinished(b, env)
	b.Logf("first-sight migrations done %s after svm's start", run.firstSight.Round(time.Second))
	svm.profile(b, "first-sight")
	historyPass(b, env, svm, seen, rs, &run)
	svm.profile(b, "end")
	seen.stop()
	if err := seen.failure(); err != nil {
		b.Fatalf("watching migrations: %v", err)
	}
	run.tally(seen, rs, historyFinal(b, env, rs))
	svm.stop()
	b.Logf("requests per migration: %s", run.requestsPerMigration())
	b.Logf("%d migrations: %d succeeded, %d failed, %d deleted unfinished; of the resources' %d, %d deleted (metric %.0f), %d left (at most %d of one resource); svm VmHWM %.0f MB",
		run.migrations, run.succeeded, run.failed, run.gone, run.created, run.deleted, run.deletedMetric, run.remaining, run.mostOfOne, float64(run.peakRSS)/1e6)
	if run.failed > 0 || run.gone > 0 || run.succeeded != run.migrations {
		b.Errorf("%d of %d migrations succeeded: %d failed, %d deleted before they finished", run.succeeded, run.migrations, run.failed, run.gone)
	}
	writeResults(b, []result{run.result()}, []string{run.note()}, run.targets())
}

// historyStep is how many finished migrations lie between two samples:
// 1,000, or a fifth of n when that gives fewer than five, in whole
// batches.
func historyStep(n, batch int) int {
	step := min(1000, n/5)
	return max(batch, step/batch*batch)
}

// historyPass creates the migrations batch by batch, waits for each batch
// to finish and samples every run.step finished, then waits for the
// history controller to delete what it does not keep.
func historyPass(b *testing.B, env *framework.Env, svm *manyCRDsController, seen *migrationLog, rs []framework.Resource, run *historyRun) {
	b.Helper()
	ctx := framework.Context(b, time.Duration(envInt("SVM_BENCH_HISTORY_TIMEOUT", 60))*time.Minute)
	generations := crdGenerations(b, env, rs)
	cpu0, err := processCPU(svm.pid())
	if err != nil {
		b.Fatal(err)
	}
	server0, err := processCPU(env.CP.APIServerPID())
	if err != nil {
		b.Fatal(err)
	}
	requests0 := serverRequests(b, env)
	sampler := svm.sampleRSS()
	started := time.Now()
	for done := 0; done < run.migrations; {
		n := min(run.batch, run.migrations-done)
		names := createHistoryBatch(ctx, b, env, rs, generations, done, n)
		seen.claim(names)
		if err := seen.waitEnded(ctx, names, 5*time.Minute); err != nil {
			b.Fatalf("migrations %d to %d: %v", done, done+n, err)
		}
		done += n
		if done%run.step == 0 || done == run.migrations {
			sampler.stop()
			s := historySampleOf(b, env, svm, rs, sampler, done, time.Since(started))
			run.samples = append(run.samples, s)
			b.Logf("%d finished after %s: svm RSS %.0f MB (peak since the last sample %.0f MB, RssAnon %.0f MB); %d migrations in the API, %d of the benchmark's resources; %.0f deleted",
				done, s.at.Round(time.Second), float64(s.rss)/1e6, float64(s.peak)/1e6, float64(s.anon)/1e6, s.inAPI, s.ofBench, s.deleted)
			sampler = svm.sampleRSS()
		}
	}
	run.wall = time.Since(started)
	sampler.stop()
	cpu1, err := processCPU(svm.pid())
	if err != nil {
		b.Fatal(err)
	}
	server1, err := processCPU(env.CP.APIServerPID())
	if err != nil {
		b.Fatal(err)
	}
	run.cpu, run.serverCPU = cpu1-cpu0, server1-server0
	run.requests = serverRequests(b, env)
	for k, v := range requests0 {
		run.requests[k] -= v
	}
	sampler = svm.sampleRSS()
	run.settled = waitHistorySettled(ctx, b, env, svm, seen, rs, run.resources*(history.DefaultSucceeded+historyReadKept))
	sampler.stop()
	run.end = historySampleOf(b, env, svm, rs, sampler, run.migrations, time.Since(started))
	run.deletedMetric = run.end.deleted
	run.peakRSS = vmHWM(svm.pid())
}

// serverRequests counts the requests the API server has answered, by
// verb and resource (with its group and subresource), from its
// apiserver_request_total.
func serverRequests(b *testing.B, env *framework.Env) map[string]float64 {
	b.Helper()
	raw, err := env.Kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(framework.Context(b, time.Minute))
	if err != nil {
		b.Fatalf("read API server metrics: %v", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		b.Fatalf("parse API server metrics: %v", err)
	}
	out := map[string]float64{}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		key := labels["verb"] + " " + labels["resource"]
		if group := labels["group"]; group != "" {
			// Two groups serve storageversionmigrations: svm's and
			// kube-controller-manager's in-tree one.
			key += "." + group
		}
		if sub := labels["subresource"]; sub != "" {
			key += "/" + sub
		}
		out[key] += m.GetCounter().GetValue()
	}
	return out
}

// crdGenerations reads the generation of every CRD of rs, which the
// trigger records on the migrations it creates.
func crdGenerations(b *testing.B, env *framework.Env, rs []framework.Resource) map[string]int64 {
	b.Helper()
	out := map[string]int64{}
	for _, r := range rs {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(framework.Context(b, time.Minute), client.ObjectKey{Name: r.CRDName()}, crd); err != nil {
			b.Fatalf("read CRD %s: %v", r.CRDName(), err)
		}
		out[r.Group] = crd.Generation
	}
	return out
}

// createHistoryBatch creates the migrations from the from-th, n of them,
// the i-th of resource i mod len(rs), 16 requests at a time, and returns
// their names.
func createHistoryBatch(ctx context.Context, b *testing.B, env *framework.Env, rs []framework.Resource, generations map[string]int64, from, n int) []string {
	b.Helper()
	names := make([]string, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range n {
		r := rs[(from+i)%len(rs)]
		g.Go(func() error {
			m := historyMigration(r, generations[r.Group])
			if err := env.Client.Create(gctx, m); err != nil {
				return fmt.Errorf("create a migration of %s: %w", r.CRDName(), err)
			}
			names[i] = m.Name
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	return names
}

// historyMigration is a migration of r as the trigger creates one after a
// change of its storage version to v1 (storagestate's createMigration):
// its name, created-by label and annotations, so that svm takes it for
// one of its own and the history limits apply to it.
func historyMigration(r framework.Resource, generation int64) *migrationv1alpha1.StorageVersionMigration {
	gr := migrationv1alpha1.GroupResource{Group: r.Group, Resource: r.Plural}
	return &migrationv1alpha1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: migrationv1alpha1.StorageStateName(gr) + "-",
			Labels:       map[string]string{trigger.CreatedByLabel: trigger.CreatedByValue},
			Annotations: map[string]string{
				trigger.TargetHashAnnotation:    resources.StorageVersionHash(r.Group, "v1", r.Kind),
				trigger.ReasonAnnotation:        trigger.ReasonChanged,
				trigger.CRDGenerationAnnotation: strconv.FormatInt(generation, 10),
			},
		},
		Spec: migrationv1alpha1.StorageVersionMigrationSpec{
			Resource: migrationv1alpha1.GroupVersionResource{Group: r.Group, Version: "v1", Resource: r.Plural},
		},
	}
}

// historySampleOf samples svm and the API after finished migrations.
func historySampleOf(b *testing.B, env *framework.Env, svm *manyCRDsController, rs []framework.Resource, sampler *rssSampler, finished int, at time.Duration) historySample {
	b.Helper()
	s := historySample{finished: finished, at: at, rss: framework.RSS(svm.pid()), peak: sampler.peak(), anon: sampler.peakAnon()}
	ms := listMigrations(framework.Context(b, time.Minute), b, env)
	s.inAPI = len(ms)
	s.ofBench = len(ofResources(ms, rs))
	s.deleted = deletedOf(b, svm, rs)
	return s
}

func listMigrations(ctx context.Context, b *testing.B, env *framework.Env) []migrationv1alpha1.StorageVersionMigration {
	b.Helper()
	var list migrationv1alpha1.StorageVersionMigrationList
	if err := env.Client.List(ctx, &list); err != nil {
		b.Fatalf("list migrations: %v", err)
	}
	return list.Items
}

// ofResources is the migrations of ms that migrate a resource of rs.
func ofResources(ms []migrationv1alpha1.StorageVersionMigration, rs []framework.Resource) []migrationv1alpha1.StorageVersionMigration {
	return slices.DeleteFunc(ms, func(m migrationv1alpha1.StorageVersionMigration) bool {
		return !slices.ContainsFunc(rs, func(r framework.Resource) bool { return m.Spec.Resource.GroupResource() == r.GVR("v1").GroupResource() })
	})
}

// deletedOf is what svm's metric counts of the migrations of rs it
// deleted, read from its metrics endpoint.
func deletedOf(b *testing.B, svm *manyCRDsController, rs []framework.Resource) float64 {
	b.Helper()
	m := framework.Scrape(b, svm.metrics)
	total := 0.0
	for _, r := range rs {
		total += m.Sum(historyDeletedMetric, "resource", r.Plural+"."+r.Group)
	}
	return total
}

// waitHistorySettled waits, up to two minutes, until the migrations of rs
// left in the API are at most bound, svm's metric counts as deleted every
// one the watch saw deleted, and neither has changed over half a second,
// so that no deletion is still on its way; it returns how long it waited
// (0 when they did not within the limit).
func waitHistorySettled(ctx context.Context, b *testing.B, env *framework.Env, svm *manyCRDsController, seen *migrationLog, rs []framework.Resource, bound int) time.Duration {
	b.Helper()
	start := time.Now()
	before, beforeMetric := -1, -1.0
	for {
		left := len(ofResources(listMigrations(ctx, b, env), rs))
		_, deleted, _ := seen.counts(rs)
		metric := deletedOf(b, svm, rs)
		if left <= bound && metric == float64(deleted) && left == before && metric == beforeMetric {
			return time.Since(start)
		}
		before, beforeMetric = left, metric
		if time.Since(start) > 2*time.Minute {
			b.Logf("two minutes after the last migration finished: %d migrations of the benchmark's resources left (bound %d), %.0f deleted by svm's count, %d by the watch's", left, bound, metric, deleted)
			return 0
		}
		select {
		case <-ctx.Done():
			b.Fatal(ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// historyFinal is the migrations of rs left in the API at the end.
func historyFinal(b *testing.B, env *framework.Env, rs []framework.Resource) []migrationv1alpha1.StorageVersionMigration {
	b.Helper()
	return ofResources(listMigrations(framework.Context(b, time.Minute), b, env), rs)
}

// tally counts what became of the migrations, from the watch and from
// left, the migrations of rs left in the API.
func (r *historyRun) tally(seen *migrationLog, rs []framework.Resource, left []migrationv1alpha1.StorageVersionMigration) {
	seen.mu.Lock()
	for name := range seen.ours {
		m := seen.byName[name]
		switch {
		case m == nil:
			r.gone++ // never seen: cannot happen once waitEnded returned
		case m.failed:
			r.failed++
		case m.succeeded:
			r.succeeded++
		case m.deleted:
			r.gone++
		}
	}
	seen.mu.Unlock()
	r.created, r.deleted, r.unfinishedDeleted = seen.counts(rs)
	r.remaining = len(left)
	perResource := map[schema.GroupResource]int{}
	for i := range left {
		perResource[left[i].Spec.Resource.GroupResource()]++
	}
	for _, n := range perResource {
		r.mostOfOne = max(r.mostOfOne, n)
	}
}

// startHistoryController starts svm controller as startManyCRDsController
// does, with its metrics endpoint on a free loopback port, which the
// benchmark reads the history's deletions from.
func startHistoryController(b *testing.B, env *framework.Env) *manyCRDsController {
	b.Helper()
	c := &manyCRDsController{profiles: os.Getenv("SVM_BENCH_PROFILE_DIR"), metrics: framework.FreeAddress(b), prefix: "history"}
	c.start(b, env, svmBinary)
	return c
}

// migrationLog is what a watch of every StorageVersionMigration saw of
// each: which resource it migrates, whether svm's label marks it, whether
// it was seen Succeeded or Failed, and deleted. The history controller
// deletes finished migrations soon after they finish, so a list polled now
// and then would miss how many ended.
type migrationLog struct {
	mu     sync.Mutex
	byName map[string]*migrationSeen
	// ours are the names of the benchmark's migrations.
	ours   map[string]bool
	err    error
	cancel context.CancelFunc
	done   sync.WaitGroup
}

type migrationSeen struct {
	resource                           schema.GroupResource
	labelled                           bool
	succeeded, failed, deleted, active bool
}

// watchMigrations starts a watch of every migration, from a list, that
// goes on across the API server's ends of a watch until stop.
func watchMigrations(b *testing.B, env *framework.Env) *migrationLog {
	b.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: framework.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	var list migrationv1alpha1.StorageVersionMigrationList
	if err := wc.List(framework.Context(b, time.Minute), &list); err != nil {
		b.Fatalf("list migrations: %v", err)
	}
	l := &migrationLog{byName: map[string]*migrationSeen{}, ours: map[string]bool{}}
	for i := range list.Items {
		l.record(watch.Added, &list.Items[i])
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return wc.Watch(ctx, &migrationv1alpha1.StorageVersionMigrationList{}, &client.ListOptions{Raw: &o})
	}}
	w, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, lw)
	if err != nil {
		b.Fatal(err)
	}
	l.done.Go(func() {
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.ResultChan():
				if !ok {
					l.fail(fmt.Errorf("the watch ended"))
					return
				}
				if m, isMigration := e.Object.(*migrationv1alpha1.StorageVersionMigration); isMigration {
					l.record(e.Type, m)
				} else if e.Type == watch.Error {
					l.fail(fmt.Errorf("watch error: %v", e.Object))
				}
			}
		}
	})
	return l
}

// record takes in one state of m.
func (l *migrationLog) record(t watch.EventType, m *migrationv1alpha1.StorageVersionMigration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.byName[m.Name]
	if s == nil {
		s = &migrationSeen{resource: m.Spec.Resource.GroupResource(), labelled: m.Labels[trigger.CreatedByLabel] != ""}
		l.byName[m.Name] = s
	}
	s.succeeded = s.succeeded || m.HasCondition(migrationv1alpha1.MigrationSucceeded)
	s.failed = s.failed || m.HasCondition(migrationv1alpha1.MigrationFailed)
	s.deleted = s.deleted || t == watch.Deleted
	s.active = !s.succeeded && !s.failed && !s.deleted
}

// claim records names as the benchmark's migrations.
func (l *migrationLog) claim(names []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, name := range names {
		l.ours[name] = true
	}
}

func (l *migrationLog) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = err
	}
}

func (l *migrationLog) failure() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *migrationLog) stop() {
	l.cancel()
	l.done.Wait()
}

// waitEnded waits until the watch has seen every migration of names
// Succeeded, Failed or deleted; it gives up after stall without one more.
func (l *migrationLog) waitEnded(ctx context.Context, names []string, stall time.Duration) error {
	last, lastChange := -1, time.Now()
	for {
		ended := 0
		l.mu.Lock()
		for _, name := range names {
			if s := l.byName[name]; s != nil && !s.active {
				ended++
			}
		}
		err := l.err
		l.mu.Unlock()
		switch {
		case err != nil:
			return err
		case ended == len(names):
			return nil
		case ended != last:
			last, lastChange = ended, time.Now()
		case time.Since(lastChange) > stall:
			return fmt.Errorf("%d of %d ended, none more for %s", ended, len(names), stall)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d ended: %w", ended, len(names), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// counts are, of the migrations of rs svm's label marks, how many the
// watch saw created, deleted, and deleted before they finished.
func (l *migrationLog) counts(rs []framework.Resource) (created, deleted, unfinishedDeleted int) {
	wanted := map[schema.GroupResource]bool{}
	for _, r := range rs {
		wanted[r.GVR("v1").GroupResource()] = true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.byName {
		if !wanted[s.resource] || !s.labelled {
			continue
		}
		created++
		if s.deleted {
			deleted++
			if !s.succeeded && !s.failed {
				unfinishedDeleted++
			}
		}
	}
	return created, deleted, unfinishedDeleted
}

func (r historyRun) workload() string {
	return fmt.Sprintf("%d StorageVersionMigrations over %d CRDs of 1 object, in batches of %d", r.migrations, r.resources, r.batch)
}

// result is the pass as a row of the table: an object per migration,
// and the requests svm's engine sent to the resources (LIST, PATCH and
// PUT), as the other rows count them.
func (r historyRun) result() result {
	var requests float64
	for _, verb := range []string{"LIST", "PATCH", "PUT"} {
		requests += r.requests[verb+" "+historyPlural]
	}
	return result{workload: r.workload(), strategy: "svm controller (defaults, svm's engine alone; " + shippedRuntime + ")",
		objects: r.migrations, passes: []passFigures{{
			wall: r.wall, serverCPU: r.serverCPU, requests: int(requests),
			usage: usage{cpu: r.cpu, peakRSS: r.peakRSS, process: true},
		}}}
}

// note is the samples as a table of their own.
func (r historyRun) note() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "Finished migrations kept (svm controller at its defaults: --succeeded-migrations-kept %d, --failed-migrations-kept %d; first-sight migrations done %.0f s after svm's start; times from the first migration created; %d of the benchmark's resources' migrations deleted, by svm's metric %.0f):\n\n",
		history.DefaultSucceeded, history.DefaultFailed, r.firstSight.Seconds(), r.deleted, r.deletedMetric)
	sb.WriteString("| migrations finished | time | svm RSS (VmRSS) | svm peak RSS since the last row | of it RssAnon (peak) | StorageVersionMigrations in the API | of the benchmark's resources | deleted (svm's metric) |\n")
	sb.WriteString("|---|---|---|---|---|---|---|---|\n")
	row := func(label string, s historySample) {
		fmt.Fprintf(&sb, "| %s | %.0f s | %.0f MB | %.0f MB | %.0f MB | %d | %d | %.0f |\n",
			label, s.at.Seconds(), float64(s.rss)/1e6, float64(s.peak)/1e6, float64(s.anon)/1e6, s.inAPI, s.ofBench, s.deleted)
	}
	for _, s := range r.samples {
		row(strconv.Itoa(s.finished), s)
	}
	row("the end: the history settled", r.end)
	fmt.Fprintf(&sb, "\nRequests the API server answered over the pass, per migration (the benchmark's creates, lists and watch among them): %s.\n", r.requestsPerMigration())
	return sb.String()
}

// requestsPerMigration is the requests of the pass per migration, in all
// and of the eight most frequent kinds.
func (r historyRun) requestsPerMigration() string {
	return requestsPer(r.requests, r.migrations, 8)
}

// requestsPer is requests (by kind, as serverRequests counts them) per
// one of n, in all and of the top most frequent kinds.
func requestsPer(requests map[string]float64, n, top int) string {
	keys := slices.Collect(maps.Keys(requests))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(requests[b], requests[a]), cmp.Compare(a, b)) })
	total := 0.0
	for _, k := range keys {
		total += requests[k]
	}
	parts := []string{fmt.Sprintf("%.1f in all", total/float64(n))}
	for _, k := range keys[:min(top, len(keys))] {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, requests[k]/float64(n)))
	}
	return strings.Join(parts, ", ")
}

func (r historyRun) targets() []target {
	w := r.workload()
	flat := target{what: fmt.Sprintf("%s: RSS flat: svm's peak RSS over the last %d migrations within %.1fx its peak over the second %d", w, r.step, historyFlatFactor, r.step)}
	if len(r.samples) < 3 {
		flat.unjudged, flat.measured = fmt.Sprintf("too few steps (%d)", len(r.samples)), "-"
	} else {
		second, last := r.samples[1], r.samples[len(r.samples)-1]
		flat.measured = fmt.Sprintf("%.0f / %.0f MB = %.2f (RssAnon %.0f / %.0f MB)", float64(last.peak)/1e6, float64(second.peak)/1e6,
			float64(last.peak)/float64(second.peak), float64(last.anon)/1e6, float64(second.anon)/1e6)
		flat.met = float64(last.peak) <= historyFlatFactor*float64(second.peak)
	}
	bound := r.resources * (history.DefaultSucceeded + historyReadKept)
	settled := "not within 2 minutes"
	if r.settled > 0 {
		settled = fmt.Sprintf("within %.1f s", r.settled.Seconds())
	}
	return []target{flat, {
		what: fmt.Sprintf("%s: the history bounded: migrations of the benchmark's resources left at most %d × (%d Succeeded kept + %d that svm still reads) = %d",
			w, r.resources, history.DefaultSucceeded, historyReadKept, bound),
		measured: fmt.Sprintf("%d left (at most %d of one resource), %s of the last finishing", r.remaining, r.mostOfOne, settled),
		met:      r.remaining <= bound && r.settled > 0,
	}, {
		what:     fmt.Sprintf("%s: every deletion counted: %s equals the migrations created (svm's first-sight ones too) less those left, none of them unfinished", w, historyDeletedMetric),
		measured: fmt.Sprintf("%.0f = %d - %d (%d unfinished)", r.deletedMetric, r.created, r.remaining, r.unfinishedDeleted),
		met:      r.deletedMetric == float64(r.created-r.remaining) && r.unfinishedDeleted == 0,
	}, {
		what:     fmt.Sprintf("%s: every migration Succeeded", w),
		measured: fmt.Sprintf("%d of %d (%d failed, %d deleted unfinished)", r.succeeded, r.migrations, r.failed, r.gone),
		met:      r.succeeded == r.migrations,
	}}
}
