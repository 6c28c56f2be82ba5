package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	svmv1 "k8s.io/api/storagemigration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svm-project/svm/test/framework"
)

// inTreeName names kube-controller-manager's in-tree migrator in the table.
const inTreeName = "in-tree (kube-controller-manager v1.37.2)"

// gcSynced is what kube-controller-manager's garbage collector logs once
// every one of its metadata informers has listed its resource; the in-tree
// migrator reads the objects to migrate from them. gcNotSynced is what it
// logs when its initial sync timed out.
const (
	gcSynced    = "Garbage collector: all resource monitors have synced"
	gcNotSynced = "Garbage collector: not all resource monitors could be synced"
)

// inTreeFigures are what an in-tree pass shows beyond the table's figures:
// when each step happened, counted from the creation of its migration.
type inTreeFigures struct {
	// running is when the runner promoted the migration (Running=True,
	// and the CRD's StorageMigrating condition set first); resourceVersion
	// when the resource-version controller recorded status.resourceVersion.
	running, resourceVersion time.Duration
	// firstWrite and lastWrite are the first and last rewrite of an object,
	// read from etcd's revisions (sampled every 100 ms during the pass).
	firstWrite, lastWrite time.Duration
	// succeeded is Succeeded=True; done is Running=False, set by the runner
	// after its cleanup (which prunes a CRD's storedVersions).
	succeeded, done time.Duration
	// idle is kube-controller-manager's CPU, in cores, before the pass.
	idle float64
	// storedVersions is the CRD's status.storedVersions after the pass
	// (custom resources only), and migrating its StorageMigrating
	// condition's reason.
	storedVersions []string
	migrating      string
}

// inTree is kube-controller-manager's storage version migrator (KEP-4192,
// GA in v1.37) as a strategy: a pass creates a storagemigration.k8s.io/v1
// StorageVersionMigration for the workload's resource and waits until it
// has Succeeded and is no longer Running, which is when an operator can
// rely on it: the runner's cleanup after success is what prunes a CRD's
// storedVersions.
//
// kube-controller-manager runs only for these passes, so that it does
// nothing during the others': its garbage collector watches every
// resource, and during another strategy's pass it would decode and
// process every write, and the API server would send it every one. It is
// started before the pass is timed and stopped after the pass is verified;
// the pass starts once the garbage collector has listed every resource
// (the in-tree migrator reads the objects from its informers) and both it
// and the API server are quiet again. Its start-up is therefore not part
// of the pass; the time it then takes to begin (status.resourceVersion,
// and the wait until the garbage collector's cache has caught up with it)
// is, since an operator waits for it too.
func inTree() strategy { return (&inTreeRun{}).strategy() }

// strategy is the in-tree strategy whose passes leave their state in it.
func (it *inTreeRun) strategy() strategy {
	return strategy{name: inTreeName, prepare: it.prepare, run: it.run}
}

// inTreeRun is the state of the in-tree strategy's current pass.
type inTreeRun struct {
	pid  int
	idle float64
	name string // the pass's migration
	// created is when the pass created its migration; samples are etcd's
	// revision over the pass, to date the first and last write.
	created time.Time
	samples []revisionSample
}

type revisionSample struct {
	at       time.Time
	revision int64
}

// prepare starts kube-controller-manager and waits until its garbage
// collector has synced and it is quiet. The cleanup it returns stops it,
// dates the pass's writes from etcd, reads the CRD, and deletes the
// migration.
func (it *inTreeRun) prepare(b *testing.B, w *workload) func(b *testing.B, prefix string, u *usage) {
	b.Helper()
	cp := w.env.CP
	if cp.ControllerManagerRunning() {
		b.Fatal("kube-controller-manager is already running before an in-tree pass")
	}
	// The log is appended to across restarts: look only at what this start
	// writes.
	logPath := cp.ControllerManagerLog()
	var offset int64
	if fi, err := os.Stat(logPath); err == nil {
		offset = fi.Size()
	}
	ctx := framework.Context(b, 3*time.Minute)
	if err := cp.StartControllerManager(ctx); err != nil {
		b.Fatalf("start kube-controller-manager: %v", err)
	}
	b.Cleanup(func() { _ = cp.StopControllerManager() })
	if err := waitLogLine(ctx, logPath, offset, gcSynced, gcNotSynced); err != nil {
		b.Fatalf("kube-controller-manager's garbage collector: %v", err)
	}
	it.pid = cp.ControllerManagerPID()
	// After its informers have listed everything, the garbage collector
	// still builds its graph from what they delivered.
	if waited, err := settle(it.pid, settleLimit); err != nil {
		b.Fatal(err)
	} else if waited >= settleLimit {
		b.Logf("kube-controller-manager was still busy after %s; measuring anyway", settleLimit)
	}
	idle, err := newCPUMeter(it.pid, 2*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	it.idle = idle.idleRate
	return it.cleanup(w)
}

// run creates the pass's migration and waits until kube-controller-manager
// has run it to its end: Succeeded=True and Running=False.
func (it *inTreeRun) run(ctx context.Context, w *workload) (usage, error) {
	cpu0, err := processCPU(it.pid)
	if err != nil {
		return usage{}, err
	}
	sampleCtx, stopSampling := context.WithCancel(ctx)
	var sampling sync.WaitGroup
	it.samples = nil
	sampling.Go(func() { it.samples = sampleRevisions(sampleCtx, w) })
	defer func() {
		stopSampling()
		sampling.Wait()
		// The last writes may follow the last sample by up to its
		// interval: one more, now that the migration is over, dates them
		// no later than its end.
		if s, err := sampleRevision(ctx, w); err == nil {
			it.samples = append(it.samples, s)
		}
	}()

	migrations := w.env.Kube.StoragemigrationV1().StorageVersionMigrations()
	it.created = time.Now()
	svm, err := migrations.Create(ctx, &svmv1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-" + w.resource.Resource + "-"},
		Spec: svmv1.StorageVersionMigrationSpec{
			Resource: metav1.GroupResource{Group: w.resource.Group, Resource: w.resource.Resource},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return usage{}, fmt.Errorf("create the in-tree migration: %w", err)
	}
	it.name = svm.Name
	figs := &inTreeFigures{idle: it.idle}
	since := func() time.Duration { return time.Since(it.created) }
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", svm.Name).String()
		return migrations.Watch(ctx, o)
	}}
	watcher, err := watchtools.NewRetryWatcherWithContext(ctx, svm.ResourceVersion, lw)
	if err != nil {
		return usage{}, err
	}
	var failure error
	_, err = watchtools.UntilWithoutRetry(ctx, watcher, func(e watch.Event) (bool, error) {
		m, ok := e.Object.(*svmv1.StorageVersionMigration)
		if !ok {
			return false, fmt.Errorf("watching %s: %v", svm.Name, e.Object)
		}
		if e.Type == watch.Deleted {
			return false, fmt.Errorf("%s was deleted", svm.Name)
		}
		conds := m.Status.Conditions
		running := meta.IsStatusConditionTrue(conds, string(svmv1.MigrationRunning))
		if figs.running == 0 && running {
			figs.running = since()
		}
		if figs.resourceVersion == 0 && m.Status.ResourceVersion != "" {
			figs.resourceVersion = since()
		}
		if figs.succeeded == 0 && meta.IsStatusConditionTrue(conds, string(svmv1.MigrationSucceeded)) {
			figs.succeeded = since()
		}
		if c := meta.FindStatusCondition(conds, string(svmv1.MigrationFailed)); c != nil && c.Status == metav1.ConditionTrue {
			failure = fmt.Errorf("the in-tree migration %s failed: %s", svm.Name, c.Message)
			return true, nil
		}
		return figs.succeeded > 0 && !running, nil
	})
	if err == nil {
		err = failure
	}
	if err != nil {
		return usage{}, err
	}
	figs.done = since()
	cpu1, err := processCPU(it.pid)
	if err != nil {
		return usage{}, err
	}
	// VmHWM since kube-controller-manager started, so it includes the
	// garbage collector's initial lists of every resource: what it holds
	// to be able to migrate at all.
	return usage{cpu: cpu1 - cpu0, peakRSS: vmHWM(it.pid), process: true, inTree: figs}, nil
}

// cleanup returns what runs once the pass is measured and verified.
func (it *inTreeRun) cleanup(w *workload) func(b *testing.B, prefix string, u *usage) {
	return func(b *testing.B, prefix string, u *usage) {
		b.Helper()
		if err := w.env.CP.StopControllerManager(); err != nil {
			b.Fatalf("stop kube-controller-manager: %v", err)
		}
		if u.inTree == nil {
			return
		}
		figs := u.inTree
		// The first and last write: the lowest and highest revision at
		// which an object of the resource was last written, dated by the
		// first sample that saw that revision.
		var first, last int64
		for _, rev := range w.env.ModRevisions(b, prefix) {
			if first == 0 || rev < first {
				first = rev
			}
			last = max(last, rev)
		}
		// Every write precedes Succeeded; the last sample may not.
		figs.firstWrite, figs.lastWrite = it.dated(first), min(it.dated(last), figs.succeeded)
		ctx := framework.Context(b, time.Minute)
		if w.resource.Group != "" {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			name := w.resource.Resource + "." + w.resource.Group
			if err := w.env.Client.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
				b.Fatalf("read CRD %s: %v", name, err)
			}
			figs.storedVersions = crd.Status.StoredVersions
			for _, c := range crd.Status.Conditions {
				if c.Type == apiextensionsv1.StorageMigrating {
					figs.migrating = fmt.Sprintf("%s (%s)", c.Status, c.Reason)
				}
			}
		}
		// A finished migration is ignored by the runner (it promotes the
		// oldest that is neither Running nor finished), so the next pass's
		// would run with this one present; it is deleted so that every
		// pass starts from the same state.
		if err := w.env.Kube.StoragemigrationV1().StorageVersionMigrations().Delete(ctx, it.name, metav1.DeleteOptions{}); err != nil {
			b.Fatalf("delete the in-tree migration %s: %v", it.name, err)
		}
	}
}

// dated is when, counted from the migration's creation, etcd had first
// reached revision.
func (it *inTreeRun) dated(revision int64) time.Duration {
	return datedIn(it.samples, it.created, revision)
}

// datedIn is when, counted from since, etcd had first reached revision
// in samples; 0 when no sample did.
func datedIn(samples []revisionSample, since time.Time, revision int64) time.Duration {
	i := slices.IndexFunc(samples, func(s revisionSample) bool { return s.revision >= revision })
	if i < 0 {
		return 0
	}
	return samples[i].at.Sub(since)
}

// writeSpan dates a strategy's first and last write from etcd, as the
// in-tree migrator's are (see inTreeRun.cleanup): the lowest and highest
// revision at which an object of the resource was last written, dated by
// the first revision sample that saw it.
type writeSpan struct {
	started     time.Time
	samples     []revisionSample
	first, last time.Duration
}

// wrap returns s with its run sampled and its writes dated into d.
func (d *writeSpan) wrap(s strategy) strategy {
	run, prepare := s.run, s.prepare
	s.run = func(ctx context.Context, w *workload) (usage, error) {
		sampleCtx, stop := context.WithCancel(ctx)
		var sampling sync.WaitGroup
		d.samples, d.started = nil, time.Now()
		sampling.Go(func() { d.samples = sampleRevisions(sampleCtx, w) })
		u, err := run(ctx, w)
		stop()
		sampling.Wait()
		if s, err := sampleRevision(ctx, w); err == nil {
			d.samples = append(d.samples, s)
		}
		return u, err
	}
	s.prepare = func(b *testing.B, w *workload) func(*testing.B, string, *usage) {
		var cleanup func(*testing.B, string, *usage)
		if prepare != nil {
			cleanup = prepare(b, w)
		}
		return func(b *testing.B, prefix string, u *usage) {
			var first, last int64
			for _, rev := range w.env.ModRevisions(b, prefix) {
				if first == 0 || rev < first {
					first = rev
				}
				last = max(last, rev)
			}
			d.first, d.last = datedIn(d.samples, d.started, first), datedIn(d.samples, d.started, last)
			if cleanup != nil {
				cleanup(b, prefix, u)
			}
		}
	}
	return s
}

// sampleRevisions reads etcd's revision every 100 ms until ctx ends. It
// asks etcd, not the API server, so that the API server's CPU is the
// migration's alone.
func sampleRevisions(ctx context.Context, w *workload) []revisionSample {
	var out []revisionSample
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if s, err := sampleRevision(ctx, w); err == nil {
			out = append(out, s)
		}
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
	}
}

// sampleRevision reads etcd's current revision (a linearizable read: every
// write acknowledged before it is counted).
func sampleRevision(ctx context.Context, w *workload) (revisionSample, error) {
	resp, err := w.env.Etcd.Get(ctx, "/svm-bench/revision", clientv3.WithCountOnly())
	if err != nil {
		return revisionSample{}, err
	}
	return revisionSample{at: time.Now(), revision: resp.Header.Revision}, nil
}

// waitLogLine waits until the log at path, from offset on, has a line
// containing want (nil) or bad (an error), until ctx ends.
func waitLogLine(ctx context.Context, path string, offset int64, want, bad string) error {
	for {
		if data, err := os.ReadFile(path); err == nil && int64(len(data)) > offset {
			tail := data[offset:]
			if bytes.Contains(tail, []byte(want)) {
				return nil
			}
			if i := bytes.Index(tail, []byte(bad)); i >= 0 {
				line, _, _ := strings.Cut(string(tail[i:]), "\n")
				return errors.New(line)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no %q in %s: %w", want, path, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// inTreeNotes sums up the in-tree passes of every workload: where the time
// went, and what the runner left on the CRD.
func inTreeNotes(results []result) []string {
	var notes []string
	for _, r := range results {
		var figs []*inTreeFigures
		for _, p := range r.passes {
			if p.usage.inTree != nil {
				figs = append(figs, p.usage.inTree)
			}
		}
		if len(figs) == 0 {
			continue
		}
		med := func(f func(*inTreeFigures) float64) float64 {
			v := make([]float64, len(figs))
			for i, x := range figs {
				v[i] = f(x)
			}
			return median(v)
		}
		sec := func(f func(*inTreeFigures) time.Duration) float64 {
			return med(func(x *inTreeFigures) float64 { return f(x).Seconds() })
		}
		each := make([]string, len(figs))
		for i, x := range figs {
			each[i] = fmt.Sprintf("%.0f s before the first write, %.0f s writing, %.0f s in all",
				x.firstWrite.Seconds(), (x.lastWrite - x.firstWrite).Seconds(), x.done.Seconds())
		}
		note := fmt.Sprintf("%s, %s (medians of %d passes, counted from the creation of its migration): Running after %.1f s, "+
			"status.resourceVersion after %.1f s, first write after %.1f s (it waits until the garbage collector's cache has reached that resourceVersion), "+
			"last write after %.1f s (%.0f objects/s while writing), Succeeded after %.1f s, Running=False after %.1f s. "+
			"kube-controller-manager's idle CPU before a pass: %.3f cores. Each pass: %s.",
			r.workload, r.strategy, len(figs),
			sec(func(x *inTreeFigures) time.Duration { return x.running }),
			sec(func(x *inTreeFigures) time.Duration { return x.resourceVersion }),
			sec(func(x *inTreeFigures) time.Duration { return x.firstWrite }),
			sec(func(x *inTreeFigures) time.Duration { return x.lastWrite }),
			med(func(x *inTreeFigures) float64 { return float64(r.objects) / (x.lastWrite - x.firstWrite).Seconds() }),
			sec(func(x *inTreeFigures) time.Duration { return x.succeeded }),
			sec(func(x *inTreeFigures) time.Duration { return x.done }),
			med(func(x *inTreeFigures) float64 { return x.idle }),
			strings.Join(each, "; "))
		if figs[0].storedVersions != nil {
			stored := make([]string, len(figs))
			for i, x := range figs {
				stored[i] = fmt.Sprintf("[%s], StorageMigrating %s", strings.Join(x.storedVersions, ", "), x.migrating)
			}
			note += " The CRD after each pass: storedVersions " + strings.Join(stored, "; ") + "."
		}
		notes = append(notes, note)
	}
	return notes
}
