package migration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	storagemigrationv1beta1 "k8s.io/api/storagemigration/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/intree"
	"github.com/svm-project/svm/internal/metrics"
)

// In-tree migrations are read from the cache; svm creates one for each
// migration it hands to kube-controller-manager, and the probe creates and
// deletes its own.
//
// +kubebuilder:rbac:groups=storagemigration.k8s.io,resources=storageversionmigrations,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions/status,verbs=patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get,namespace=kube-system,resourceNames=kube-controller-manager

// FieldManager names the controller's writes to migrations.
const FieldManager = "svm-migration-controller"

// The controller reads and patches migrations, records events, and lists
// and patches every resource it migrates: rewriting arbitrary resources is
// the one thing that needs a wildcard, and it is limited to list, watch
// and patch. Watch reads nothing list does not; it lets a migration skip
// objects others wrote while it ran.
// Migrations are read from the cache (list and watch, never get) and
// written with merge patches only. Objects are written back with merge
// patches too (the engine's rewrite, and managedFields moved off a retired
// version); update is for dry runs only, which tell how a managedFields
// entry reads in the version kept.
//
// +kubebuilder:rbac:groups=migration.k8s.io,resources=storageversionmigrations,verbs=list;watch;patch
// +kubebuilder:rbac:groups=migration.k8s.io,resources=storageversionmigrations/status,verbs=patch
// +kubebuilder:rbac:groups=migration.k8s.io,resources=storagestates,verbs=list
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create
// +kubebuilder:rbac:groups=*,resources=*,verbs=list;watch;update;patch

// Reconciler schedules and runs StorageVersionMigrations.
type Reconciler struct {
	Client client.Client
	// Executors holds who rewrites the objects; nothing runs until it has
	// been chosen.
	Executors *Choice
	// InTreeServed says that the server serves the in-tree
	// storagemigration.k8s.io API: its migrations are watched, and svm
	// never executes a resource while one of them is Running.
	InTreeServed bool
	// InTreeBetaServed says that the server serves the in-tree API in
	// v1beta1 only (Kubernetes 1.35 and 1.36, when turned on): its
	// migrations hold their resources the same way.
	InTreeBetaServed bool
	// Guard, if set, is read before and after every run: a migration
	// waits while API servers disagree on the storage version, and starts
	// over instead of succeeding if the storage version may have changed
	// while it ran.
	Guard    StorageGuard
	Recorder events.EventRecorder
	// Metrics, if set, counts finished migrations; the engine reports the
	// rest itself.
	Metrics *metrics.Metrics
	// MaxParallel bounds how many resources migrate at once. Default 1.
	MaxParallel int
	Clock       clock.Clock

	runner  runner
	backoff workqueue.TypedRateLimiter[string]
	mu      sync.Mutex
	wait    map[string]time.Time
	ended   map[types.UID]bool
	// held remembers which in-tree migration each held-back migration was
	// last seen waiting for, so that its event is recorded once.
	held map[string]string
	// handedOver names the runs started with the in-tree executor, while
	// they run: how many of kube-controller-manager's workers svm fills.
	handedOver map[string]bool
	// listed reads every migration from the manager's cache into a slice
	// reused from call to call (see migrationList).
	listed migrationList
}

// SetupWithManager registers the reconciler and its runner with mgr.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	r.setDefaults()
	if err := mgr.Add(&r.runner); err != nil {
		return err
	}
	// The migrations' informer, registered now and started with the cache.
	informer, err := mgr.GetCache().GetInformer(context.Background(), &migrationv1alpha1.StorageVersionMigration{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("get the migrations' informer: %w", err)
	}
	if s, ok := informer.(interface{ GetStore() toolscache.Store }); ok {
		r.listed.store = s.GetStore()
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("storageversionmigration").
		// Scheduling looks at every migration at once; one reconcile at a
		// time keeps the decisions consistent.
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		Watches(&migrationv1alpha1.StorageVersionMigration{}, scheduleAll).
		WatchesRawSource(source.Channel(r.runner.events(), scheduleAll))
	// An in-tree migration starting holds its resource; one ending
	// releases it.
	if r.InTreeServed {
		b = b.Watches(&storagemigrationv1.StorageVersionMigration{}, scheduleAll)
	}
	if r.InTreeBetaServed {
		b = b.Watches(&storagemigrationv1beta1.StorageVersionMigration{}, scheduleAll)
	}
	return b.Complete(r)
}

// scheduleAll turns every event the scheduler hears of (a migration
// created, changed or deleted, an in-tree migration that starts or ends, a
// run that ended) into one and the same request: every reconcile
// schedules all migrations, so a burst of events while one runs comes to
// one more, not one per migration, each reading them all.
var scheduleAll = handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Name: "schedule"}}}
})

// setDefaults fills in the defaults and the reconciler's own state.
func (r *Reconciler) setDefaults() {
	if r.MaxParallel <= 0 {
		r.MaxParallel = 1
	}
	if r.Clock == nil {
		r.Clock = clock.RealClock{}
	}
	r.backoff = workqueue.NewTypedItemExponentialFailureRateLimiter[string](10*time.Second, 10*time.Minute)
	r.wait = map[string]time.Time{}
	r.ended = map[types.UID]bool{}
	r.held = map[string]string{}
	r.handedOver = map[string]bool{}
	r.runner.done = make(chan string, 16)
}

// Reconcile decides which migrations run and starts or stops them. The
// request's name does not matter: every call schedules all migrations.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	executors := r.Executors.get()
	if executors == nil {
		// The executor is being chosen (a probe of the in-tree migrator
		// takes seconds); nothing runs before.
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	migrations, err := r.listed.read(ctx, r.Client)
	if err != nil {
		return reconcile.Result{}, err
	}
	inTree, err := intree.List(ctx, r.Client, r.InTreeServed, r.InTreeBetaServed, client.UnsafeDisableDeepCopy)
	if err != nil {
		return reconcile.Result{}, err
	}
	r.deleteAbandoned(ctx, migrations, inTree)
	running, ends := r.runner.state()
	r.settle(ctx, ends)
	notBefore, ended := r.runState(migrations)
	maxParallel := r.MaxParallel
	switch {
	case executors.Name == intree.ExecutorInTree && executors.Overflow:
		// As many hand-overs as kube-controller-manager runs at once,
		// and svm's engine runs --max-parallel beside them.
		maxParallel += intree.RunnerWorkers
	case executors.Name == intree.ExecutorInTree:
		// A hand-over mostly waits for kube-controller-manager, which
		// runs several migrations at once: as many are handed over.
		maxParallel = max(maxParallel, intree.RunnerWorkers)
	}
	d := Schedule(ScheduleInput{
		Migrations: migrations, InTree: inTree, Running: running, NotBefore: notBefore, Ended: ended,
		MaxParallel: maxParallel, Now: r.Clock.Now(),
	})
	r.apply(d, migrations, executors, running)
	return reconcile.Result{RequeueAfter: d.RequeueAfter}, nil
}

// runState returns copies of the backoff deadlines and of the runs that
// ended, first forgetting ended runs once the cache, listed as migrations,
// shows their outcome or no longer has their object.
func (r *Reconciler) runState(migrations []migrationv1alpha1.StorageVersionMigration) (notBefore map[string]time.Time, ended map[types.UID]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ended) > 0 { // mostly none: no map of every migration per call
		inCache := make(map[types.UID]bool, len(migrations))
		for i := range migrations {
			if !migrations[i].IsFinished() {
				inCache[migrations[i].UID] = true
			}
		}
		maps.DeleteFunc(r.ended, func(uid types.UID, _ bool) bool { return !inCache[uid] })
	}
	return maps.Clone(r.wait), maps.Clone(r.ended)
}

// apply carries out d: it stops runs, records the migrations held back,
// and starts runs with executors.
func (r *Reconciler) apply(d ScheduleDecision, migrations []migrationv1alpha1.StorageVersionMigration, executors *Executors, running map[string]bool) {
	for _, name := range d.Stop {
		var cause error = errStopped
		if holder, ok := d.Yield[name]; ok {
			cause = &heldByInTree{name: holder}
		}
		r.runner.stop(name, cause)
	}
	// Only the migrations d names: most calls start none and hold none.
	byName := make(map[string]*migrationv1alpha1.StorageVersionMigration, len(d.Start)+len(d.Held))
	for _, name := range d.Start {
		byName[name] = nil
	}
	for name := range d.Held {
		byName[name] = nil
	}
	for i := 0; i < len(migrations) && len(byName) > 0; i++ {
		if _, ok := byName[migrations[i].Name]; ok {
			byName[migrations[i].Name] = &migrations[i]
		}
	}
	r.noteHeld(byName, d.Held)
	maps.DeleteFunc(r.handedOver, func(name string, _ bool) bool { return !running[name] || slices.Contains(d.Stop, name) })
	for _, name := range d.Start {
		m := byName[name].DeepCopy() // never hand a cached object to a goroutine that edits it
		ex, inTree := executors.For(m, len(r.handedOver))
		if inTree {
			r.handedOver[name] = true
		}
		r.runner.start(name, func(ctx context.Context) ending { return r.execute(ctx, m, ex) })
	}
}

// noteHeld records an event the first time a migration is seen held back
// by an in-tree migration of its resource.
func (r *Reconciler) noteHeld(byName map[string]*migrationv1alpha1.StorageVersionMigration, held map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, holder := range held {
		if r.held[name] == holder {
			continue
		}
		r.held[name] = holder
		if m := byName[name]; m != nil {
			r.event(m, corev1.EventTypeNormal, ReasonWaitingForInTreeMigration, heldMessage(m, holder))
		}
	}
	maps.DeleteFunc(r.held, func(name, _ string) bool { _, ok := held[name]; return !ok })
}

func heldMessage(m *migrationv1alpha1.StorageVersionMigration, holder string) string {
	return "In-tree migration " + holder + " of " + resourceString(m) + " is running; svm waits for it to end"
}

// errStopped is why a run is stopped when its migration was deleted or
// finished elsewhere.
var errStopped = errors.New("the migration was deleted or finished elsewhere")

// heldByInTree is why a run is stopped when an in-tree migration of its
// resource started: svm never rewrites a resource beside it.
type heldByInTree struct{ name string }

func (h *heldByInTree) Error() string { return "in-tree migration " + h.name + " is running" }

// took is how long a finished migration ran, from its first start to its
// end, whichever process started it.
func took(st *migrationv1alpha1.StorageVersionMigrationStatus) time.Duration {
	if st.StartTime == nil || st.CompletionTime == nil {
		return 0
	}
	return st.CompletionTime.Sub(st.StartTime.Time)
}

func condition(st *migrationv1alpha1.StorageVersionMigrationStatus, t migrationv1alpha1.MigrationConditionType) migrationv1alpha1.MigrationCondition {
	for _, c := range st.Conditions {
		if c.Type == t {
			return c
		}
	}
	return migrationv1alpha1.MigrationCondition{}
}

var errGone = errors.New("migration deleted")

// An ending is how a run ended, as far as the scheduler is concerned:
// handed back by the runner when the run's goroutine returns, and settled
// by the next Reconcile before it schedules. Besides the migration's
// status in the API, it is the one way anything of a run reaches the
// scheduler: no run changes the scheduler's state itself.
type ending struct {
	m *migrationv1alpha1.StorageVersionMigration
	// retry is why the migration is to run again after a growing
	// backoff; nil when it is not.
	retry error
	// final says that the migration ended for good, Succeeded or Failed.
	final bool
}

// settle records how runs ended: a migration to retry is held back for a
// growing backoff, and one that ended for good is forgotten by the
// backoff and remembered as ended until the cache shows it.
func (r *Reconciler) settle(ctx context.Context, ends []ending) {
	for _, e := range ends {
		switch {
		case e.m == nil:
			// Stopped or held: nothing to settle.
		case e.final:
			r.backoff.Forget(e.m.Name)
			r.mu.Lock()
			delete(r.wait, e.m.Name)
			r.ended[e.m.UID] = true
			r.mu.Unlock()
		case e.retry != nil:
			delay := r.backoff.When(e.m.Name)
			r.mu.Lock()
			r.wait[e.m.Name] = r.Clock.Now().Add(delay)
			r.mu.Unlock()
			if !errors.Is(e.retry, errGone) {
				r.event(e.m, corev1.EventTypeWarning, ReasonRetrying, truncate(fmt.Sprintf("Retrying in %s: %v", delay, e.retry), 1024))
			}
			klog.FromContext(ctx).Info("Migration will be retried", "migration", klog.KObj(e.m), "after", delay, "err", e.retry)
		}
	}
}

// saveStartOver saves a status that startOver reset, and an empty continue
// token. A merge patch leaves out what is empty, so the fields started
// over are removed with explicit nulls.
func (r *Reconciler) saveStartOver(ctx context.Context, m *migrationv1alpha1.StorageVersionMigration, status *migrationv1alpha1.StorageVersionMigrationStatus) error {
	var fingerprint any
	if status.StorageFingerprint != "" {
		fingerprint = status.StorageFingerprint
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": m.UID}, "status": map[string]any{
		"conditions": status.Conditions, "progress": nil, "resourceVersionCheckpoint": nil,
		"storageVersionHash": nil, "storageFingerprint": fingerprint, "failedObjects": nil,
	}})
	if err != nil {
		return err
	}
	if err := r.patch(ctx, m, patch, true); err != nil {
		return err
	}
	return r.patchContinueToken(ctx, m, "")
}

// startOver forgets a migration's progress, keeping its conditions and
// start time, with fingerprint as the new starting point.
func startOver(st *migrationv1alpha1.StorageVersionMigrationStatus, fingerprint string) {
	st.Progress = migrationv1alpha1.MigrationProgress{}
	st.ResourceVersionCheckpoint = ""
	st.StorageVersionHash = ""
	st.FailedObjects = nil
	st.StorageFingerprint = fingerprint
}

// patchStatus writes status with a merge patch that carries the migration's
// uid, so a migration deleted and re-created under the same name is never
// given another's state.
func (r *Reconciler) patchStatus(ctx context.Context, m *migrationv1alpha1.StorageVersionMigration, status *migrationv1alpha1.StorageVersionMigrationStatus) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": m.UID}, "status": status})
	if err != nil {
		return err
	}
	return r.patch(ctx, m, patch, true)
}

func (r *Reconciler) patchContinueToken(ctx context.Context, m *migrationv1alpha1.StorageVersionMigration, token string) error {
	if m.Spec.ContinueToken == token {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": m.UID}, "spec": map[string]any{"continueToken": token}})
	if err != nil {
		return err
	}
	if err := r.patch(ctx, m, patch, false); err != nil {
		return err
	}
	m.Spec.ContinueToken = token
	return nil
}

func (r *Reconciler) patch(ctx context.Context, m *migrationv1alpha1.StorageVersionMigration, patch []byte, status bool) error {
	obj := &migrationv1alpha1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: m.Name}}
	raw := client.RawPatch(types.MergePatchType, patch)
	var err error
	if status {
		err = r.Client.Status().Patch(ctx, obj, raw, client.FieldOwner(FieldManager))
	} else {
		err = r.Client.Patch(ctx, obj, raw, client.FieldOwner(FieldManager))
	}
	// NotFound: deleted. Invalid on metadata.uid: deleted and re-created
	// under the same name; this run belongs to the old object.
	if apierrors.IsNotFound(err) || apierrors.IsInvalid(err) && strings.Contains(err.Error(), "metadata.uid") {
		return errGone
	}
	if err != nil {
		return fmt.Errorf("save migration %s: %w", m.Name, err)
	}
	return nil
}

func (r *Reconciler) event(m *migrationv1alpha1.StorageVersionMigration, eventType, reason, note string) {
	if r.Recorder != nil {
		r.Recorder.Eventf(m, nil, eventType, reason, "Migrate", "%s", note)
	}
}

func resourceString(m *migrationv1alpha1.StorageVersionMigration) string {
	gvr := schema.GroupVersionResource{Group: m.Spec.Resource.Group, Version: m.Spec.Resource.Version, Resource: m.Spec.Resource.Resource}
	return gvr.String()
}
