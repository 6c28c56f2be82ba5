package migrator

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/svm-project/svm/internal/admission"
	"github.com/svm-project/svm/internal/kubeclients"
)

// maxRecordedChanges bounds the objects written by others that a migration
// remembers at once, a few megabytes of names (see changes).
const maxRecordedChanges = 100_000

// DefaultWorkers is the most writes in flight per migration by default:
// room enough for adaptive pacing to reach the knee of the servers measured
// (docs/benchmarks.md), where it then holds.
const DefaultWorkers = 64

// DefaultFieldManager names svm's writes in the API server's audit log.
const DefaultFieldManager = "storage-version-migrator"

// Options tune a Migrator. Zero values mean the defaults.
type Options struct {
	// ChunkSize is the most objects listed per request. Default 500.
	// Under a Limiter, a list brings about a second's writes at its rate
	// at most (see chunkAtRate).
	ChunkSize int64
	// ChunkBytes is the most bytes of object metadata a list brings
	// (decoded JSON), and with ChunkSize bounds what a chunk holds: each
	// list asks for as many objects as fit at the size of the last
	// chunk's, and one whose objects reach it first is cut and asked
	// again for those that fit. Default DefaultChunkBytes.
	ChunkBytes int64
	// Workers is the most writes a migration has in flight; adaptive
	// pacing decides how many below it. Default 64.
	Workers int
	// Limiter, if set, is waited on before every request. Share one limiter
	// between Migrators to cap the load of a whole process.
	Limiter *rate.Limiter
	// FieldManager names svm's writes. Default DefaultFieldManager.
	FieldManager string
	// Retry is the backoff for transient errors. Default: 200ms doubling to
	// at most 30s, with jitter, 10 attempts.
	Retry Backoff
	// DisablePacing turns off adaptive pacing (see pacer): Workers writes
	// are then always in flight, whatever the API server's latency.
	DisablePacing bool
	// DisableChangeWatch turns off the watch that finds objects written
	// or deleted by others while the migration runs (see changes): they
	// then cost a write answered by 409 Conflict, as they would without
	// watch permission.
	DisableChangeWatch bool
	// RequestTimeout bounds every request, from sending it to reading the
	// last byte of its answer; a request that runs out of it is retried as
	// a transient error. Waits client-go makes for Retry-After count
	// towards it. Default 1m.
	RequestTimeout time.Duration
	// MaxFailedObjects bounds how many failed objects a Result names; all
	// are counted. Default 100.
	MaxFailedObjects int
	// ProgressInterval is how often OnProgress is called while a chunk is
	// being written. Default 1s.
	ProgressInterval time.Duration
	// Observer is told what every migration does, for metrics and health
	// checks. Default: nothing is observed.
	Observer Observer
	// Discovery, if set, is the process's discovery client
	// (kubeclients.Set), which the engine looks resources up and reads
	// schemas with; nil builds one over the engine's own HTTP client.
	Discovery discovery.DiscoveryInterface
}

// Backoff is an exponential backoff with jitter.
type Backoff struct {
	Initial  time.Duration
	Max      time.Duration
	Attempts int
}

func (o Options) withDefaults() Options {
	if o.ChunkSize <= 0 {
		o.ChunkSize = 500
	}
	o.ChunkSize = chunkAtRate(o.ChunkSize, o.Limiter)
	if o.ChunkBytes <= 0 {
		o.ChunkBytes = DefaultChunkBytes
	}
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.FieldManager == "" {
		o.FieldManager = DefaultFieldManager
	}
	if o.Retry.Initial <= 0 {
		o.Retry.Initial = 200 * time.Millisecond
	}
	if o.Retry.Max <= 0 {
		o.Retry.Max = 30 * time.Second
	}
	if o.Retry.Attempts <= 0 {
		o.Retry.Attempts = 10
	}
	if o.RequestTimeout <= 0 {
		// kube-apiserver gives up on a request after a minute by default
		// (--request-timeout): one still unanswered by then never will
		// be, such as an answer whose connection stalled halfway.
		o.RequestTimeout = time.Minute
	}
	if o.MaxFailedObjects <= 0 {
		o.MaxFailedObjects = 100
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = time.Second
	}
	if o.Observer == nil {
		o.Observer = NopObserver{}
	}
	return o
}

// Migrator rewrites resources. It is safe for concurrent use; all its
// migrations share its rate limiter.
type Migrator struct {
	// metadata lists, writes, watches for others' writes and reads
	// objects for managedFields: the engine needs nothing but metadata.
	metadata metadata.Interface
	// rest lists and writes, and decodes the answers as they arrive
	// (see listChunk and patch).
	rest      rest.Interface
	discovery discovery.DiscoveryInterface
	opts      Options
	// writes holds a place for every paced write at the server, of every
	// migration this Migrator runs, side by side or one after another:
	// Workers in all, so that the API server gets no more of svm's writes
	// at once than one migration alone may send, however many run (see
	// capWrites); nil when pacing is off.
	writes *semaphore.Weighted
}

// New returns a Migrator that sends its requests with cfg.
func New(cfg *rest.Config, opts Options) (*Migrator, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("build the HTTP client: %w", err)
	}
	md, err := metadata.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("build the metadata client: %w", err)
	}
	// The metadata client's settings, for the requests it cannot make:
	// lists and writes whose answers are read as a stream.
	restCfg := metadata.ConfigFor(cfg)
	restCfg.GroupVersion, restCfg.APIPath = &schema.GroupVersion{}, "/"
	rc, err := rest.RESTClientForConfigAndClient(restCfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("build the REST client: %w", err)
	}
	disc := opts.Discovery
	if disc == nil {
		if disc, err = kubeclients.NewDiscovery(cfg, httpClient); err != nil {
			return nil, err
		}
	}
	m := &Migrator{metadata: md, rest: rc, discovery: disc, opts: opts.withDefaults()}
	if !m.opts.DisablePacing {
		m.writes = semaphore.NewWeighted(int64(m.opts.Workers))
	}
	return m, nil
}

// FailedObject is an object that could not be rewritten.
type FailedObject struct {
	Namespace, Name, Reason string
}

// State is what a migration needs to resume where it left off.
type State struct {
	// ContinueToken lists the next chunk; empty at the start and the end.
	ContinueToken string
	// Checkpoint is the resourceVersion the migration started from.
	Checkpoint string
	// Progress so far.
	Progress Progress
	// FailedObjects so far (at most Options.MaxFailedObjects).
	FailedObjects []FailedObject
	// LeftEntries names the entries counted in
	// Progress.ManagedFieldsLeft (at most Options.MaxFailedObjects).
	LeftEntries []LeftEntry
	// Refusals are the admission webhooks and policies that refused
	// writes, each with the objects it left failed.
	Refusals []Refusal
	// Pacing is adaptive pacing's state when the State was taken: set in
	// the States given to OnChunk while pacing is on, for display; a
	// resumed run measures the server afresh.
	Pacing *PacerState
}

// Request asks for one migration.
type Request struct {
	Resource schema.GroupVersionResource
	// Resume, if set, continues an earlier run from its last saved State.
	Resume *State
	// OnChunk is called after every chunk is fully handled, with the state
	// to resume from. Persist it there; an error stops the migration.
	OnChunk func(context.Context, State) error
	// OnProgress is called with the counters now and then, for display.
	OnProgress func(Progress)
	// ManagedFields, if set, also moves server-side apply's field
	// ownership off retired versions, in the same writes (see
	// ManagedFields).
	ManagedFields *ManagedFields
	// StoredSince, if set, says since when every object written is
	// stored in the target: objects written later are skipped without a
	// request (Progress.WrittenSinceChange).
	StoredSince *StoredSince
	// ThroughStatus: an object whose write an admission webhook or policy
	// denies is written again, the same empty patch, through the
	// resource's status subresource, where it has one (see
	// writeThroughStatus). Off, such an object fails.
	ThroughStatus bool
}

// StoredSince is the etcd revision from which every API server stored a
// resource in the version with Hash (its storageVersionHash): an object
// whose resourceVersion is newer was written in that version. The skip
// applies only when the migration's target, as discovery reports it when
// the run starts, has that hash; otherwise every object is written.
type StoredSince struct {
	Hash     string
	Revision string
}

// Result is the outcome of a migration.
type Result struct {
	State
	// StorageVersionHash is discovery's storageVersionHash of the resource
	// when the migration started: the version it migrated to.
	StorageVersionHash string
}

// Run migrates req.Resource. It returns a *TerminalError when the resource
// cannot be migrated, an *ObjectsFailedError when some objects could not be
// rewritten (the rest were), and the context's error when cancelled; the
// Result holds the progress in every case. Any other error is transient
// trouble that outlived the retries: run the migration again later,
// resuming from the Result's State, which is then the last completed
// chunk's.
func (m *Migrator) Run(ctx context.Context, req Request) (res Result, err error) {
	gr := req.Resource.GroupResource()
	m.opts.Observer.RunStarted(gr)
	defer func() { m.opts.Observer.RunEnded(gr, err) }()
	return m.migrate(ctx, req)
}

func (m *Migrator) migrate(ctx context.Context, req Request) (Result, error) {
	var res Result
	if req.Resume != nil {
		res.State = *req.Resume
		res.FailedObjects = slices.Clone(req.Resume.FailedObjects)
		res.LeftEntries = slices.Clone(req.Resume.LeftEntries)
	}
	run := &run{m: m, req: req, res: &res, saved: res.State, gr: req.Resource.GroupResource(), observer: m.opts.Observer}
	run.sizer = chunkSizer{most: m.opts.ChunkSize, budget: m.opts.ChunkBytes}
	if req.ManagedFields != nil {
		run.keep = req.ManagedFields.Names
	}
	if !m.opts.DisablePacing {
		run.pacer = newPacer(m.opts.Workers, time.Now)
		gr := req.Resource.GroupResource()
		run.pacer.observe = func(s PacerState) { m.opts.Observer.Paced(gr, s) }
		run.capWrites()
	}
	var info *metav1.APIResource
	// Discovery requests are retried like the others but not observed:
	// observers count the migration's lists and writes.
	err := run.retry(ctx, "", func(ctx context.Context) error {
		var err error
		info, run.hasStatus, err = m.lookup(ctx, req.Resource)
		return err
	})
	if err != nil {
		return res, err
	}
	res.StorageVersionHash = info.StorageVersionHash
	run.namespaced = info.Namespaced
	if ss := req.StoredSince; ss != nil && ss.Hash != "" && ss.Hash == info.StorageVersionHash {
		run.storedSince = ss.Revision
	}

	run.counters.load(res.Progress)
	run.refusals.list = slices.Clone(res.Refusals)
	err = run.listAndRewrite(ctx)
	res.Progress = run.counters.snapshot(res.Progress.RemainingEstimate)
	res.Refusals = run.refusals.snapshot()
	var terminal *TerminalError
	if err != nil && !errors.As(err, &terminal) {
		// The migration will be resumed from the returned state: the last
		// completed chunk's, so that the chunk in flight is handled and
		// counted again rather than counted twice.
		res.State = run.saved
		return res, err
	}
	if err != nil {
		return res, err
	}
	if res.Progress.Failed > 0 {
		return res, &ObjectsFailedError{Count: res.Progress.Failed}
	}
	return res, nil
}

// Lookup finds the resource in discovery, with its storage version hash,
// and checks that it can be migrated (listed and patched): a
// *TerminalError says why not.
func (m *Migrator) Lookup(ctx context.Context, gvr schema.GroupVersionResource) (*metav1.APIResource, error) {
	r, _, err := m.lookup(ctx, gvr)
	return r, err
}

// LookupWithStatus is Lookup, and also says whether the resource has a
// status subresource svm can write through (Request.ThroughStatus).
func (m *Migrator) LookupWithStatus(ctx context.Context, gvr schema.GroupVersionResource) (*metav1.APIResource, bool, error) {
	return m.lookup(ctx, gvr)
}

// lookup finds the resource in discovery and checks svm can migrate it;
// status says whether it has a status subresource svm can patch.
func (m *Migrator) lookup(ctx context.Context, gvr schema.GroupVersionResource) (_ *metav1.APIResource, status bool, _ error) {
	// Discovery clients that take no context (fakes, wrappers) ignore it;
	// client-go's own honours it.
	disc := discovery.ToServerResourcesInterfaceWithContext(m.discovery)
	list, err := disc.ServerResourcesForGroupVersionWithContext(ctx, gvr.GroupVersion().String())
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		if apierrors.IsNotFound(err) {
			return nil, false, terminal(ReasonResourceNotFound, "the server does not serve %s", gvr.GroupVersion())
		}
		if IsTransient(err) {
			return nil, false, fmt.Errorf("discover %s: %w", gvr.GroupVersion(), err)
		}
		return nil, false, terminal(ReasonDiscoveryFailed, "discover %s: %w", gvr.GroupVersion(), err)
	}
	for i := range list.APIResources {
		r := &list.APIResources[i]
		if r.Name != gvr.Resource {
			continue
		}
		if !slices.Contains(r.Verbs, "list") || !slices.Contains(r.Verbs, "patch") {
			return nil, false, terminal(ReasonNotMigratable, "%s does not support both list and patch (verbs: %v)", gvr, r.Verbs)
		}
		status := slices.ContainsFunc(list.APIResources, func(s metav1.APIResource) bool {
			return s.Name == gvr.Resource+"/status" && slices.Contains(s.Verbs, "patch")
		})
		return r, status, nil
	}
	return nil, false, terminal(ReasonResourceNotFound, "the server does not serve %s", gvr)
}

// run is the state of one migration in progress.
type run struct {
	m          *Migrator
	req        Request
	res        *Result
	namespaced bool
	// storedSince is Request.StoredSince's revision when it applies to
	// this run, "" when every object is to be written.
	storedSince string
	// hasStatus says that the resource has a status subresource svm can
	// patch (Request.ThroughStatus).
	hasStatus bool
	counters  counters
	gr        schema.GroupResource
	observer  Observer
	// saved is the state after the last completed chunk: where the
	// migration resumes if this run stops early.
	saved State
	// pacer adapts the writes in flight to the server; nil when off.
	pacer *pacer
	// sizer chooses each list's limit; only the goroutine that lists
	// uses it, one list at a time.
	sizer chunkSizer
	// keep says which listed managedFields to keep; nil: none.
	keep func([]metav1.ManagedFieldsEntry) bool
	// changes knows objects written by others since the checkpoint; nil
	// when off. Its watch starts at the first sign of another writer.
	changes   *changes
	watchOnce sync.Once
	watchCtx  context.Context
	watching  sync.WaitGroup

	failedMu sync.Mutex
	refusals refusals

	// probeMu makes the workers whose writes met a 404 naming no object
	// ask one at a time whether the resource is still served
	// (confirmServed); probeStop, once set, is an answer that stops the
	// run (not served, or no telling), which the others then take without
	// asking again.
	probeMu   sync.Mutex
	probeStop error

	// guard keeps svm's writes from losing managedFields (see entries.go).
	guard guard
}

func (r *run) listAndRewrite(ctx context.Context) error {
	// Every chunk's list is sent while the chunk before it is being
	// written, so that the writes never wait for a list. The chunks are
	// still written one after another, and a chunk's state is saved only
	// once all its objects are handled: a prefetched list is all that a
	// stop loses. Under a rate cap, the list is sent once the chunk
	// before it is written instead: the cap is for gentleness, and a list
	// sent beside the writes is a request more at the server at once,
	// where the rate needs only the writes.
	ctx, cancel := context.WithCancel(ctx)
	defer r.watching.Wait()
	defer cancel()
	ahead := !capped(r.m.opts.Limiter)
	first := true
	next := r.prefetch(ctx, r.res.ContinueToken)
	for {
		l := <-next
		if l.err != nil {
			return l.err
		}
		list := l.list.list
		if list.Continue != "" && ahead {
			next = r.prefetch(ctx, list.Continue)
		}
		if first {
			if r.res.Checkpoint == "" {
				r.res.Checkpoint = list.ResourceVersion
				r.saved.Checkpoint = list.ResourceVersion
			}
			if !r.m.opts.DisableChangeWatch {
				r.changes = newChanges(maxRecordedChanges, r.res.Checkpoint)
				r.watchCtx = ctx
			}
			first = false
		}
		remaining := list.RemainingItemCount
		if list.Continue == "" {
			remaining = new(int64) // the last chunk: nothing is left, whatever the server estimates
		}
		r.observer.Listed(r.gr, r.counters.listed.Add(int64(len(list.Items))), remaining)
		r.res.Progress.RemainingEstimate = remaining
		if err := r.rewriteChunk(ctx, list.Items, l.list.held); err != nil {
			return err
		}
		r.res.ContinueToken = list.Continue
		r.res.Progress = r.counters.snapshot(remaining)
		r.saved = r.snapshotState()
		if r.req.OnChunk != nil {
			if err := r.req.OnChunk(ctx, r.snapshotState()); err != nil {
				return fmt.Errorf("save progress: %w", err)
			}
		}
		r.reportProgress()
		if list.Continue == "" {
			return nil
		}
		if !ahead {
			next = r.prefetch(ctx, list.Continue)
		}
	}
}

// listing is a chunk's list, or why it could not be had.
type listing struct {
	list listed
	err  error
}

// prefetch lists the chunk that token continues from, in the background.
func (r *run) prefetch(ctx context.Context, token string) <-chan listing {
	out := make(chan listing, 1)
	go func() {
		list, err := r.list(ctx, token)
		out <- listing{list, err}
	}()
	return out
}

// list lists the chunk that token continues from (the first when empty),
// with retries, within Options.ChunkBytes (see chunkSizer).
func (r *run) list(ctx context.Context, token string) (listed, error) {
	limit := r.sizer.limit()
	for {
		var l listed
		err := r.retry(ctx, "list", func(ctx context.Context) error {
			var err error
			l, err = r.listChunk(ctx, token, limit)
			return err
		})
		switch {
		case err == nil && l.cut:
			// The objects are larger than the last chunk's: ask again,
			// from the same token, for those that fit. A continue token
			// lists from one snapshot, so these are the same objects, and
			// the answer brings no more than was read.
			limit = int64(len(l.list.Items))
			continue
		case (apierrors.IsResourceExpired(err) || apierrors.IsGone(err)) && token != "":
			// The continue token expired (etcd compacted past its snapshot).
			// The server may offer an inconsistent token that continues from
			// the same key at the latest version; otherwise start over. The
			// checkpoint makes objects already rewritten cost no write.
			token = inconsistentContinue(err)
			continue
		case err != nil:
			return listed{}, classifyListError(r.req.Resource, err)
		}
		r.sizer.seen(len(l.list.Items), l.bytes)
		return l, nil
	}
}

func inconsistentContinue(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().ListMeta.Continue
	}
	return ""
}

func classifyListError(gvr schema.GroupVersionResource, err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case apierrors.IsNotFound(err):
		return terminal(ReasonResourceNotFound, "list %s: %w", gvr, err)
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return terminal(ReasonForbidden, "list %s: %w", gvr, err)
	case apierrors.IsMethodNotSupported(err):
		return terminal(ReasonNotMigratable, "list %s: %w", gvr, err)
	case IsTransient(err):
		return fmt.Errorf("list %s: %w", gvr, err)
	}
	return terminal(ReasonListFailed, "list %s: %w", gvr, err)
}

// rewriteChunk writes every object of a chunk with a bounded pool of workers
// and returns once all are handled, so a saved continue token never skips an
// object that was not handled.
// held[i] is what items[i]'s managedFields held.
func (r *run) rewriteChunk(ctx context.Context, items []metav1.PartialObjectMetadata, held []held) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	work := make(chan int)
	var wg sync.WaitGroup
	workers := min(r.m.opts.Workers, len(items))
	for range workers {
		wg.Go(func() {
			for i := range work {
				if err := r.rewrite(ctx, &items[i], held[i]); err != nil {
					cancel(err)
				}
			}
		})
	}
	ticker := time.NewTicker(r.m.opts.ProgressInterval)
	defer ticker.Stop()
feed:
	for i := range items {
		if r.changes != nil {
			r.changes.pass(objectName(&items[i]))
		}
		for {
			select {
			case work <- i:
				continue feed
			case <-ticker.C:
				r.reportProgress()
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(work)
	wg.Wait()
	return context.Cause(ctx)
}

// rewrite writes one object back unchanged; h is what its managedFields
// held when listed. It returns an error only when the whole migration must
// stop.
func (r *run) rewrite(ctx context.Context, obj *metav1.PartialObjectMetadata, h held) error {
	if mf := r.req.ManagedFields; mf != nil {
		if mf.Names(obj.ManagedFields) {
			if done, err := r.retarget(ctx, obj); done || err != nil {
				return err
			}
			// None of its entries could be moved: rewritten as any other.
		} else if mf.Only {
			r.counters.nothingToRewrite.Add(1)
			return nil
		}
	}
	changed, deleted := newerThan(obj.ResourceVersion, r.res.Checkpoint), false
	if !changed && r.changes != nil {
		changed, deleted = r.changes.take(objectName(obj))
	}
	if changed {
		if deleted {
			r.counters.gone.Add(1)
		} else {
			r.counters.writtenSinceStart.Add(1)
		}
		r.counters.skippedWithoutWrite.Add(1)
		r.observer.ObjectSkipped(r.gr, skipOf(deleted), nil)
		return nil
	}
	if newerThan(obj.ResourceVersion, r.storedSince) {
		r.counters.writtenSinceChange.Add(1)
		r.counters.skippedWithoutWrite.Add(1)
		r.observer.ObjectSkipped(r.gr, SkipWrittenSinceChange, nil)
		return nil
	}
	if err := r.probe(ctx, obj, h); err != nil {
		return err
	}
	var a writeAnswer
	err := r.retry(ctx, "patch", func(ctx context.Context) error {
		var err error
		a, err = r.patch(ctx, obj, patchAs{entries: len(h) > 0})
		return err
	})
	if err == nil {
		return r.written(ctx, obj, h, a)
	}
	if denial, ok := admission.Denied(err); ok {
		_, err := r.denied(ctx, obj, h, denial, err)
		return err
	}
	return r.settle(ctx, obj, err)
}

// written counts an object svm wrote, whose entries named h before the
// write that answered a, unless the write lost them (check): then it
// returns the error that stops the run.
func (r *run) written(ctx context.Context, obj *metav1.PartialObjectMetadata, h held, a writeAnswer) error {
	if err := r.check(ctx, obj, h, a); err != nil {
		return err
	}
	r.countWritten(obj.ResourceVersion, a.resourceVersion)
	return nil
}

// countWritten counts an object svm wrote at resourceVersion before,
// answered with after.
func (r *run) countWritten(before, after string) {
	// The API server stores nothing when the bytes it would write are
	// the stored ones, and then answers with the same resourceVersion.
	restored := after != before
	if restored {
		r.counters.restored.Add(1)
	} else {
		r.counters.alreadyCurrent.Add(1)
	}
	r.observer.ObjectMigrated(r.gr, restored)
}

// settle counts an object whose write failed with err. It returns an
// error only when the whole migration must stop.
func (r *run) settle(ctx context.Context, obj *metav1.PartialObjectMetadata, err error) error {
	switch Classify(err) {
	case Skip:
		gone := apierrors.IsNotFound(err)
		if gone && !namesObject(err, obj.Name) {
			if err := r.confirmServed(ctx, obj, err); err != nil {
				return err
			}
		}
		if gone {
			r.counters.gone.Add(1)
		} else {
			r.counters.writtenSinceStart.Add(1)
		}
		r.observer.ObjectSkipped(r.gr, skipOf(gone), err)
		r.watchOthers()
		return nil
	case Terminal:
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return terminal(terminalReason(err), "rewrite %s %s: %w", r.req.Resource.Resource, objectName(obj), err)
	case Transient:
		// The retries are exhausted, but the trouble is the server's or
		// the network's, not the object's: stop, to be resumed later,
		// rather than fail an object that a later attempt will rewrite.
		return fmt.Errorf("rewrite %s %s: %w", r.req.Resource.Resource, objectName(obj), err)
	default:
		// An error about this object: record it and go on with the others.
		r.recordFailure(obj, err)
		return nil
	}
}

// confirmServed asks whether the resource is still served, with a list of
// one object, after the write of obj was answered by notFound, a 404 that
// does not name it (see namesObject). Served, the object is gone, as the
// 404 said, and it returns nil. Otherwise the resource itself went during
// the run (its CRD deleted, its APIService removed) and the run must stop,
// Failed with ResourceNotFound: counting every object left as gone would
// end it Succeeded, while an APIService removed leaves its objects in
// etcd, in the old version. When the list cannot tell (an outage that
// outlives the retries), the run stops to be resumed, as after any
// outage, and the object is not counted at all.
func (r *run) confirmServed(ctx context.Context, obj *metav1.PartialObjectMetadata, notFound error) error {
	r.probeMu.Lock()
	defer r.probeMu.Unlock()
	if r.probeStop != nil {
		return r.probeStop
	}
	err := r.retry(ctx, "list", func(ctx context.Context) error {
		_, err := r.listChunk(ctx, "", 1)
		return err
	})
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	r.probeStop = probeStop(r.gr, objectName(obj), notFound, classifyListError(r.req.Resource, err))
	return r.probeStop
}

// probeStop is why a run stops when the write of the object named name
// answered notFound, a 404 naming no object, and the list that asked
// whether gr is still served answered listErr (classifyListError's). Only
// the list's error is wrapped, the one that decides: a 404 means gr is no
// longer served; another terminal error keeps its reason; anything else
// stops the run to be resumed.
func probeStop(gr schema.GroupResource, name string, notFound, listErr error) error {
	var t *TerminalError
	switch {
	case errors.As(listErr, &t) && t.Reason == ReasonResourceNotFound:
		return terminal(ReasonResourceNotFound, "%s is no longer served: the write of %s answered 404 (%v), and so did a list: %w", gr, name, notFound, t.Err)
	case errors.As(listErr, &t):
		return terminal(t.Reason, "rewrite %s %s: %v; then, asked whether the resource is still served: %w", gr, name, notFound, t.Err)
	}
	return fmt.Errorf("rewrite %s %s: %v; then, asked whether the resource is still served: %w", gr, name, notFound, listErr)
}

// watchOthers starts the watch for objects others write (see changes), once:
// at the first write answered by 409 or 404, the sign that someone else
// writes or deletes objects of the resource. A resource nobody else writes
// thus costs no watch at all, and the watch, starting from the checkpoint,
// still learns every change made before it started.
func (r *run) watchOthers() {
	if r.changes == nil {
		return
	}
	r.watchOnce.Do(func() {
		r.watching.Go(func() {
			r.changes.watch(r.watchCtx, r.m.metadata.Resource(r.req.Resource), r.waitLimiter)
		})
	})
}

func terminalReason(err error) string {
	switch {
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return ReasonForbidden
	case apierrors.IsMethodNotSupported(err):
		return ReasonNotMigratable
	}
	return ReasonWriteFailed
}

func (r *run) recordFailure(obj *metav1.PartialObjectMetadata, err error) {
	r.counters.failed.Add(1)
	r.observer.ObjectFailed(r.gr, err)
	r.failedMu.Lock()
	defer r.failedMu.Unlock()
	if len(r.res.FailedObjects) < r.m.opts.MaxFailedObjects {
		r.res.FailedObjects = append(r.res.FailedObjects, FailedObject{Namespace: obj.Namespace, Name: obj.Name, Reason: reason(err)})
	}
}

// reason is the API server's message for a failure, bounded in length.
// svm adds no object contents to it.
func reason(err error) string {
	msg := err.Error()
	if len(msg) > 512 {
		msg = msg[:512] + "..."
	}
	return msg
}

func objectName(obj *metav1.PartialObjectMetadata) string {
	if obj.Namespace == "" {
		return obj.Name
	}
	return obj.Namespace + "/" + obj.Name
}

func (r *run) snapshotState() State {
	r.failedMu.Lock()
	defer r.failedMu.Unlock()
	s := r.res.State
	s.FailedObjects = slices.Clone(r.res.FailedObjects)
	s.LeftEntries = slices.Clone(r.res.LeftEntries)
	s.Refusals = r.refusals.snapshot()
	if r.pacer != nil {
		ps := r.pacer.state()
		s.Pacing = &ps
	}
	return s
}

func (r *run) reportProgress() {
	if r.req.OnProgress != nil {
		r.req.OnProgress(r.counters.snapshot(r.res.Progress.RemainingEstimate))
	}
}

// waitLimiter waits for the rate limiter, if there is one.
func (r *run) waitLimiter(ctx context.Context) error {
	if r.m.opts.Limiter == nil {
		return nil
	}
	return r.m.opts.Limiter.Wait(ctx)
}

// capWrites sets what a paced write waits for once it has its place in
// the pacer's window: a place among the writes at the server of every
// migration of the Migrator (Migrator.writes), then the rate limiter. A
// write waits for both with its place in the window taken (see pacer),
// and gives the shared place back once answered: a write waiting out a
// backoff holds none. A migration whose writes fail is held to one write
// by its own pacer, and so holds at most one shared place once the
// writes it had sent are answered: one resource's webhook timing out
// does not starve the others, as one pacer for all did. Under a rate cap
// the window is also held to what the rate needs.
func (r *run) capWrites() {
	l := r.m.opts.Limiter
	if l != nil && l.Limit() != rate.Inf {
		r.pacer.qps = float64(l.Limit())
	}
	shared := r.m.writes
	r.pacer.wait = func(ctx context.Context) error {
		if err := shared.Acquire(ctx, 1); err != nil {
			return err
		}
		if l == nil {
			return nil
		}
		start := time.Now()
		err := l.Wait(ctx)
		r.observer.LimiterWaited(r.gr, time.Since(start))
		if err != nil {
			shared.Release(1)
		}
		return err
	}
}

// turn waits until a request with verb may be sent. A paced write waits
// for room in the pacer's window (unless it held its place for this
// retry), then for the rate limiter; any other request for the limiter.
func (r *run) turn(ctx context.Context, verb string, paced, held bool, tk ticket) (ticket, error) {
	switch {
	case paced && held:
		return r.pacer.resend(ctx, tk)
	case paced:
		return r.pacer.acquire(ctx)
	case r.m.opts.Limiter == nil:
		return tk, nil
	}
	start := time.Now()
	err := r.waitLimiter(ctx)
	if verb != "" {
		r.observer.LimiterWaited(r.gr, time.Since(start))
	}
	return tk, err
}

// retry calls fn, a request with verb, until it succeeds, fails with a
// non-transient error, or the backoff is exhausted. Every attempt waits for
// the rate limiter and has Options.RequestTimeout to complete. Throttling
// with Retry-After is first handled inside client-go, which sleeps for the
// time the server asked for. An empty verb is not reported to the observer.
func (r *run) retry(ctx context.Context, verb string, fn func(context.Context) error) error {
	return r.retryUpTo(ctx, verb, r.m.opts.Retry.Attempts, fn)
}

// retryUpTo is retry with at most attempts attempts.
func (r *run) retryUpTo(ctx context.Context, verb string, attempts int, fn func(context.Context) error) error {
	b := r.m.opts.Retry
	delay := b.Initial
	var err error
	// held: the pacer kept this write's place in its window for the retry.
	var tk ticket
	held := false
	defer func() {
		if held {
			r.pacer.drop()
		}
	}()
	for attempt := 1; ; attempt++ {
		// Writes wait for room in the pacer's window, and so do the dry
		// runs that convert managedFields, which cost the API server a
		// write's work; lists are one at a time anyway. A write being
		// retried may have kept its place (see pacer.release).
		paced := (verb == "patch" || verb == "dryrun") && r.pacer != nil
		var werr error
		if tk, werr = r.turn(ctx, verb, paced, held, tk); werr != nil {
			return werr
		}
		attemptCtx, cancel := context.WithTimeout(ctx, r.m.opts.RequestTimeout)
		sent := time.Now()
		err = fn(attemptCtx)
		cancel()
		if paced {
			r.m.writes.Release(1)
			o := answered
			switch {
			case apierrors.IsTooManyRequests(err):
				o = throttled
			case err != nil && IsTransient(err) && ctx.Err() == nil:
				o = failed
			}
			held = r.pacer.release(tk, time.Since(sent), o)
		}
		if verb != "" {
			r.observer.Requested(r.gr, verb, err)
		}
		if err != nil && ctx.Err() != nil {
			// Stopped from outside: the request did not fail by itself.
			return ctx.Err()
		}
		if err == nil || !IsTransient(err) || attempt >= attempts {
			return err
		}
		if verb != "" {
			r.observer.Retry(r.gr, err)
		}
		// Jitter keeps retrying workers from moving in lockstep; sleeping
		// at least half the delay keeps the backoff a backoff.
		sleep := delay/2 + rand.N(delay/2+1)
		// A server that said when to come back is not asked sooner, even
		// once client-go has given up waiting for it (after ten 429s).
		if seconds, ok := apierrors.SuggestsClientDelay(err); ok {
			sleep = max(sleep, time.Duration(seconds)*time.Second)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(sleep):
		}
		delay = min(2*delay, b.Max)
	}
}

// skipOf is the SkipReason of an object found deleted (gone) or written since
// the start.
func skipOf(gone bool) SkipReason {
	if gone {
		return SkipGone
	}
	return SkipWrittenSinceStart
}

// newerThan reports whether resourceVersion rv is newer than checkpoint.
// resourceVersions are opaque to clients in general, but kube-apiserver's
// are etcd revisions; when either does not parse, nothing is assumed newer.
func newerThan(rv, checkpoint string) bool {
	a, errA := strconv.ParseUint(rv, 10, 64)
	b, errB := strconv.ParseUint(checkpoint, 10, 64)
	return errA == nil && errB == nil && a > b
}

// counters are updated by many workers at once.
type counters struct {
	listed, restored, alreadyCurrent, writtenSinceStart, writtenSinceChange, gone, failed atomic.Int64
	skippedWithoutWrite, nothingToRewrite, managedFieldsRewritten, throughStatus          atomic.Int64

	leftMu sync.Mutex
	left   LeftCounts
}

func (c *counters) load(p Progress) {
	c.listed.Store(p.Listed)
	c.restored.Store(p.Restored)
	c.alreadyCurrent.Store(p.AlreadyCurrent)
	c.writtenSinceStart.Store(p.WrittenSinceStart)
	c.writtenSinceChange.Store(p.WrittenSinceChange)
	c.gone.Store(p.Gone)
	c.failed.Store(p.Failed)
	c.skippedWithoutWrite.Store(p.SkippedWithoutWrite)
	c.nothingToRewrite.Store(p.NothingToRewrite)
	c.managedFieldsRewritten.Store(p.ManagedFieldsRewritten)
	c.throughStatus.Store(p.ThroughStatus)
	c.leftMu.Lock()
	c.left = p.ManagedFieldsLeft
	c.leftMu.Unlock()
}

func (c *counters) snapshot(remaining *int64) Progress {
	return Progress{RemainingEstimate: remaining, Counts: Counts{
		Listed:                 c.listed.Load(),
		Restored:               c.restored.Load(),
		AlreadyCurrent:         c.alreadyCurrent.Load(),
		WrittenSinceStart:      c.writtenSinceStart.Load(),
		WrittenSinceChange:     c.writtenSinceChange.Load(),
		Gone:                   c.gone.Load(),
		Failed:                 c.failed.Load(),
		SkippedWithoutWrite:    c.skippedWithoutWrite.Load(),
		NothingToRewrite:       c.nothingToRewrite.Load(),
		ManagedFieldsRewritten: c.managedFieldsRewritten.Load(),
		ManagedFieldsLeft:      c.leftSnapshot(),
		ThroughStatus:          c.throughStatus.Load(),
	}}
}

func (c *counters) leftSnapshot() LeftCounts {
	c.leftMu.Lock()
	defer c.leftMu.Unlock()
	return c.left
}
