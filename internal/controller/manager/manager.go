// Package manager builds and runs svm controller: the checks before it
// starts (where its leader election lease lives, whether its CRDs are
// served, whether it may list what it watches), the controller-runtime
// manager with svm's controllers (migrations, the trigger, re-encryption)
// and its probes, and the bounded shutdown. The command, internal/cli,
// reads the flags and hands them over as a Config.
package manager

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/controller/encryption"
	"github.com/svm-project/svm/internal/controller/history"
	"github.com/svm-project/svm/internal/controller/migration"
	"github.com/svm-project/svm/internal/controller/storagestate"
	"github.com/svm-project/svm/internal/eventrecorder"
	"github.com/svm-project/svm/internal/fingerprint"
	"github.com/svm-project/svm/internal/health"
	"github.com/svm-project/svm/internal/intree"
	"github.com/svm-project/svm/internal/kubeclients"
	"github.com/svm-project/svm/internal/metrics"
	"github.com/svm-project/svm/internal/operation"
	"github.com/svm-project/svm/internal/scheme"
)

// Config is what svm controller was asked, its flags validated, and the
// process's clients.
type Config struct {
	// Clients are the process's (kubeclients.New): every check and
	// controller asks with them, and reads the time on their Clock, the
	// API server's: the controllers compare it with times the server
	// stamps, and with each other's, whichever replica wrote them.
	Clients *kubeclients.Set
	// Tuning tunes svm's engine, as the flags say.
	Tuning operation.Tuning
	// RequestInterval is how long a migration may go without a request
	// under --qps before its progress is called stalled (0: no cap).
	RequestInterval time.Duration
	MaxParallel     int

	LeaderElect             bool
	LeaderElectionNamespace string
	// ConfigFlags are kubectl's flags, where the lease's namespace comes
	// from outside a pod (see chooseLeaseNamespace).
	ConfigFlags    *genericclioptions.ConfigFlags
	MetricsAddress string
	HealthAddress  string
	// Profiling serves net/http/pprof's handlers on the metrics endpoint.
	Profiling bool

	Trigger             bool
	TriggerInterval     time.Duration
	StaleAfter          time.Duration
	TriggerRetryDelay   time.Duration
	MigrateUnhashed     bool
	PruneStoredVersions bool
	ThroughStatus       bool
	CRDSettleDelay      time.Duration
	CRDDrainMargin      time.Duration
	StorageVersionAPI   bool

	EncryptedResources      []string
	APIServerEndpoints      []string
	EncryptionCheckInterval time.Duration
	Executor                intree.Executor
	ExecutorRecheck         time.Duration

	// SucceededMigrationsKept and FailedMigrationsKept are the history
	// limits of finished migrations per resource (package history).
	SucceededMigrationsKept int
	FailedMigrationsKept    int
}

// eventQueue is how many Events wait to be sent at most: the Events of a
// bulk flip of 1,000 CRDs (about six each) are made over minutes and sent
// as fast as they are made; the queue holds a burst, and what it cannot
// hold is dropped and counted (storage_migrator_events_dropped_total).
const eventQueue = 1000

var (
	// migrationsResource is svm's migrations, which svm controller must
	// be allowed to list.
	migrationsResource = migrationv1alpha1.GroupVersion.WithResource("storageversionmigrations")
	// inTreeMigrationsResource is the in-tree migrator's API.
	inTreeMigrationsResource = intree.GroupVersion.WithResource("storageversionmigrations")
)

// Run checks that svm controller can start, then runs it until ctx ends,
// then drains running migrations.
func Run(ctx context.Context, o Config) error {
	if err := requireCRDs(ctx, o.Clients); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting for the CRDs, as asked: nothing started, nothing to drain
		}
		return err
	}
	if err := requireAccess(ctx, o.Clients.Metadata, migrationsResource); err != nil {
		return err
	}
	b, err := o.newBase(ctx)
	if err != nil {
		return err
	}
	betaServed, err := o.setUpMigrations(b)
	if err != nil {
		return err
	}
	if err := o.setUpHistory(ctx, b); err != nil {
		return err
	}
	if o.Trigger {
		if err := o.setUpTrigger(ctx, b, betaServed); err != nil {
			return err
		}
	}
	return b.start(ctx)
}

// controllerBase is what every controller of svm controller is set up on.
type controllerBase struct {
	clients *kubeclients.Set
	mgr     ctrl.Manager
	metrics *metrics.Metrics
	tracker *health.Tracker
	// epochs is what svm has seen of each CRD's generations, one for the
	// trigger and the migrations' guard: both must agree on when two
	// reads are the same storage (internal/fingerprint).
	epochs *fingerprint.Epochs
	// events sends the Events of every controller (internal/eventrecorder).
	events *eventrecorder.Sender
}

// newBase registers svm's metrics and builds the manager, with its leader
// election lock (see electionLock) wrapped for the probes.
func (o *Config) newBase(ctx context.Context) (*controllerBase, error) {
	clients := o.Clients
	svmMetrics := metrics.New()
	if err := svmMetrics.Register(ctrlmetrics.Registry); err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	tracker := health.NewTracker(clock.RealClock{}, o.LeaderElect)
	opts := ctrl.Options{
		Scheme:                        scheme.Scheme,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              leaderElectionID,
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsAddress, ExtraHandlers: profilingHandlers(o.Profiling)},
		HealthProbeBindAddress:        o.HealthAddress,
		GracefulShutdownTimeout:       ptr(30 * time.Second),
		// The groups svm maps, not every group the server serves.
		MapperProvider: kubeclients.NewRESTMapper,
		// Nothing reads the managedFields of svm's own objects: the cache
		// keeps them without.
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&migrationv1alpha1.StorageVersionMigration{}: {Transform: cache.TransformStripManagedFields()},
			&migrationv1alpha1.StorageState{}:            {Transform: cache.TransformStripManagedFields()},
		}},
	}
	if o.LeaderElect {
		lock, err := o.electionLock(ctx)
		if err != nil {
			return nil, err
		}
		opts.LeaderElectionNamespace = lock.namespace
		opts.LeaderElectionResourceLockInterface = tracker.WrapLock(lock.Interface)
	}
	mgr, err := ctrl.NewManager(clients.Config, opts)
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	sender := eventrecorder.New(clients.Events, mgr.GetScheme(), eventQueue, svmMetrics.EventDropped)
	return &controllerBase{clients: clients, mgr: mgr, metrics: svmMetrics, tracker: tracker, epochs: fingerprint.NewEpochs(), events: sender}, nil
}

// start adds the probes and runs the manager (see startUntilStopped).
func (b *controllerBase) start(ctx context.Context) error {
	// See package health for what ready and live mean.
	if err := b.mgr.AddHealthzCheck("progress", b.tracker.HealthzCheck(b.mgr.Elected())); err != nil {
		return err
	}
	if err := b.mgr.AddReadyzCheck("synced-and-settled", b.tracker.ReadyzCheck(b.mgr.GetCache().WaitForCacheSync, b.mgr.Elected())); err != nil {
		return err
	}
	// Events are sent until the manager has stopped, not stopped with the
	// runnables that make them: the manager stops its other runnables
	// before the controllers, whose last runs' Events (stopped at
	// shutdown) would be lost. The sender sends what is queued then, for
	// a few seconds at most (eventrecorder.Sender.Start).
	sendCtx, stopSending := context.WithCancel(context.WithoutCancel(ctx))
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		_ = b.events.Start(sendCtx)
	}()
	err := startUntilStopped(ctx, b.mgr.Start, shutdownGrace)
	stopSending()
	<-sent
	return err
}

// setUpMigrations adds the migration controller, with the engine and the
// executors it runs migrations with, and tells whether the in-tree API is
// served in v1beta1 only.
func (o *Config) setUpMigrations(b *controllerBase) (betaServed bool, _ error) {
	stallAfter := health.StallAfter(o.RequestInterval)
	ops, err := operation.New(b.clients.Config, b.clients, operation.Options{
		Tuning: o.Tuning, Observer: operation.Observers(b.metrics, b.tracker.MigrationObserver(stallAfter)),
	})
	if err != nil {
		return false, err
	}
	choice, served, betaServed, err := o.setUpExecutors(b, ops)
	if err != nil {
		return false, err
	}
	r := &migration.Reconciler{
		Client:           b.mgr.GetClient(),
		Executors:        choice,
		InTreeServed:     served,
		InTreeBetaServed: betaServed,
		Guard:            migration.APIStorageGuard{Reader: b.mgr.GetAPIReader(), StorageVersions: b.clients.Kube.InternalV1alpha1(), Epochs: b.epochs},
		Recorder:         b.events.Recorder("svm-controller"),
		Metrics:          b.metrics,
		MaxParallel:      o.MaxParallel,
		Clock:            b.clients.Clock,
	}
	if err := r.SetupWithManager(b.mgr); err != nil {
		return false, fmt.Errorf("set up migration controller: %w", err)
	}
	return betaServed, nil
}

// setUpHistory adds the controller that deletes finished migrations
// beyond the history limits. It keeps every failure of a row until the
// retry delay stops growing: --trigger-retry-delay, doubling up to the
// hour the trigger and the re-encryption wait at most.
func (o *Config) setUpHistory(ctx context.Context, b *controllerBase) error {
	h := &history.Controller{Client: b.mgr.GetClient(), Metrics: b.metrics, Policy: history.Policy{
		Succeeded: o.SucceededMigrationsKept, Failed: o.FailedMigrationsKept, Row: history.RowFor(o.TriggerRetryDelay, time.Hour),
	}}
	if err := h.SetupWithManager(ctx, b.mgr); err != nil {
		return fmt.Errorf("set up history controller: %w", err)
	}
	return nil
}

// setUpTrigger adds the trigger, which keeps StorageStates and creates
// migrations, and the re-encryption controller unless
// --encrypted-resources is empty.
func (o *Config) setUpTrigger(ctx context.Context, b *controllerBase, betaServed bool) error {
	mgr := b.mgr
	t := &storagestate.Controller{
		Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Metadata: b.clients.Metadata, Discovery: b.clients.BulkDiscovery, InTreeBetaServed: betaServed,
		Interval: o.TriggerInterval, StaleAfter: o.StaleAfter, RetryBase: o.TriggerRetryDelay,
		PruneStoredVersions: o.PruneStoredVersions, ThroughStatus: o.ThroughStatus, CRDs: b.clients.CRDs.ApiextensionsV1().CustomResourceDefinitions(), MigrateUnhashed: o.MigrateUnhashed,
		SettleDelay: o.CRDSettleDelay, DrainMargin: o.CRDDrainMargin, Clock: b.clients.Clock, Epochs: b.epochs,
		Recorder: b.events.Recorder("svm-trigger"), Metrics: b.metrics, Health: b.tracker,
	}
	if o.StorageVersionAPI {
		t.StorageVersions = b.clients.Kube
	}
	t.Leases, t.Servers, t.Endpoints = b.clients.Kube.CoordinationV1(), b.clients.Servers, o.APIServerEndpoints
	if err := t.SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("set up trigger: %w", err)
	}
	if len(o.EncryptedResources) > 0 {
		return o.setUpEncryption(ctx, b)
	}
	return nil
}

// setUpEncryption adds the re-encryption controller.
func (o *Config) setUpEncryption(ctx context.Context, b *controllerBase) error {
	mgr := b.mgr
	e := &encryption.Controller{
		Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Leases: b.clients.Kube.CoordinationV1(), Discovery: b.clients.Discovery,
		Servers: b.clients.Servers, Endpoints: o.APIServerEndpoints, Resources: o.EncryptedResources,
		Interval: o.EncryptionCheckInterval, RetryBase: o.TriggerRetryDelay, Clock: b.clients.Clock,
		Recorder: b.events.Recorder("svm-encryption"), Metrics: b.metrics, Health: b.tracker,
	}
	if err := e.SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("set up re-encryption: %w", err)
	}
	return nil
}

// setUpExecutors adds the runnable that chooses, once svm controller
// leads, who executes its migrations (see intree.Choose), and returns where
// the choice will be found and whether the in-tree API is served in v1
// or in v1beta1 only (see inTreeAPI).
func (o *Config) setUpExecutors(b *controllerBase, ops *operation.Operations) (_ *migration.Choice, served, betaServed bool, _ error) {
	served, betaServed, err := inTreeAPI(b.clients)
	if err != nil {
		return nil, false, false, err
	}
	engine, inTree := newExecutors(b.clients, b.mgr, ops)
	choice := &migration.Choice{}
	chooser := &migration.Chooser{
		Asked: o.Executor, Served: served, BetaServed: betaServed, Choice: choice, Metrics: b.metrics, Recheck: o.ExecutorRecheck,
		Prober: intree.Prober{Client: b.mgr.GetClient(), Reader: b.mgr.GetAPIReader(), Clock: b.clients.Clock},
		Engine: engine,
		InTree: inTree,
	}
	if _, _, err := intree.Choose(o.Executor, served, &intree.Verdict{}); err != nil {
		return nil, false, false, err // --executor=in-tree where it is not served: say so now
	}
	return choice, served, betaServed, b.mgr.Add(chooser)
}

// newExecutors builds the two executors a chooser chooses from: svm's
// engine (through ops), and the hand-over to kube-controller-manager, which falls back
// to it. Both mark a custom resource's CRD while they migrate it.
func newExecutors(clients *kubeclients.Set, mgr ctrl.Manager, ops *operation.Operations) (migration.EngineExecutor, migration.InTreeExecutor) {
	marker := &migration.CRDMarker{Reader: mgr.GetAPIReader(), CRDs: clients.CRDs.ApiextensionsV1().CustomResourceDefinitions()}
	engine := migration.EngineExecutor{Operations: ops, CRDs: marker}
	inTree := migration.InTreeExecutor{
		Client: mgr.GetClient(), Reader: mgr.GetClient(), Lookup: ops.Lookup, Fallback: engine, Operations: ops, CRDs: marker,
		Empty: func(ctx context.Context, gvr schema.GroupVersionResource) (bool, error) {
			// One object's metadata, from the API server: not a cache.
			list, err := clients.Metadata.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
			if err != nil {
				return false, err
			}
			return len(list.Items) == 0 && list.Continue == "", nil
		},
	}
	return engine, inTree
}

// shutdownGrace bounds how long the process may take to stop after SIGTERM:
// the manager's own GracefulShutdownTimeout for draining migrations, plus a
// margin to save their state.
const shutdownGrace = 30*time.Second + 10*time.Second

// startUntilStopped runs start until it returns, or until ctx has ended and
// grace has passed. controller-runtime's manager does not return when it is
// stopped before its caches synced (as when RBAC forbids watching one of
// svm's types): it waits for them forever, so without this bound SIGTERM or
// Ctrl-C would never end the process. Giving up then loses nothing: a
// manager whose caches never synced started no migration.
func startUntilStopped(ctx context.Context, start func(context.Context) error, grace time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- start(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		return fmt.Errorf("did not stop within %s of being asked to; the API server may forbid svm to list or watch its own objects (see the log)", grace)
	}
}

func ptr[T any](v T) *T { return &v }
