package cli

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/svm-project/svm/internal/controller/encryption"
	"github.com/svm-project/svm/internal/controller/migration"
	"github.com/svm-project/svm/internal/controller/storagestate"
	"github.com/svm-project/svm/internal/health"
	"github.com/svm-project/svm/internal/intree"
	"github.com/svm-project/svm/internal/kubeclients"
	"github.com/svm-project/svm/internal/metrics"
	"github.com/svm-project/svm/internal/migrator"
	"github.com/svm-project/svm/internal/scheme"
	"github.com/svm-project/svm/pkg/migrate"
)

// ControllerOptions are the options of `svm controller`.
type ControllerOptions struct {
	ConfigFlags             *genericclioptions.ConfigFlags
	Engine                  EngineFlags
	MaxParallel             int
	LeaderElect             bool
	LeaderElectionNamespace string
	MetricsAddress          string
	HealthAddress           string

	Trigger             bool
	TriggerInterval     time.Duration
	StaleAfter          time.Duration
	TriggerRetryDelay   time.Duration
	MigrateUnhashed     bool
	PruneStoredVersions bool
	CRDSettleDelay      time.Duration
	CRDDrainMargin      time.Duration
	StorageVersionAPI   bool

	EncryptedResources      []string
	APIServerEndpoints      []string
	EncryptionCheckInterval time.Duration
	// Executor is --executor as given; executor is it parsed.
	Executor string
	executor intree.Executor
	// ExecutorRecheck is how often auto looks again at what its choice
	// rested on.
	ExecutorRecheck time.Duration
}

func newControllerCommand(configFlags *genericclioptions.ConfigFlags) *cobra.Command {
	o := &ControllerOptions{ConfigFlags: configFlags}
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the controller that executes StorageVersionMigrations",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	o.Engine.addFlags(cmd.Flags())
	fs := cmd.Flags()
	fs.IntVar(&o.MaxParallel, "max-parallel", 1, "resources migrated at the same time")
	fs.StringVar(&o.Executor, "executor", string(intree.ExecutorAuto), "who rewrites the objects of svm's migrations: svm (its own engine), in-tree (kube-controller-manager's in-tree migrator, storagemigration.k8s.io/v1), or auto: in-tree when that API is served, kube-controller-manager holds a live lease and takes up a probe migration, svm otherwise; auto chooses again when that lease appears, stops being renewed or changes hands")
	fs.DurationVar(&o.ExecutorRecheck, "executor-recheck-interval", 30*time.Second, "with --executor=auto, how often to look again at the kube-controller-manager lease the choice rests on")
	fs.BoolVar(&o.LeaderElect, "leader-elect", true, "elect a leader so that only one replica migrates")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election lease (default: in a pod, the pod's namespace; elsewhere kubectl's: --namespace, else the kubeconfig context's, else default)")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", ":8080", "address of the metrics endpoint; 0 turns it off")
	fs.StringVar(&o.HealthAddress, "health-probe-bind-address", ":8081", "address of the health and readiness endpoints; 0 turns them off")
	fs.BoolVar(&o.Trigger, "trigger", true, "keep StorageStates and start migrations when storage versions change")
	fs.DurationVar(&o.TriggerInterval, "trigger-interval", 10*time.Minute, "time between discovery rounds of the trigger")
	fs.DurationVar(&o.StaleAfter, "storage-state-stale-after", 10*time.Minute, "at start, StorageStates whose heartbeat is older are reset to Unknown")
	fs.BoolVar(&o.PruneStoredVersions, "prune-stored-versions", true, "after a successful triggered migration of a custom resource, cut its CRD's status.storedVersions to the storage version")
	fs.BoolVar(&o.MigrateUnhashed, "migrate-unhashed", true, "migrate once, when first seen, every resource whose discovery reports no storage version hash (some aggregated APIs), since the trigger cannot see its storage version change")
	fs.DurationVar(&o.TriggerRetryDelay, "trigger-retry-delay", time.Minute, "delay before a failed triggered migration is followed by a new one; doubles per failure up to an hour")
	fs.DurationVar(&o.CRDSettleDelay, "crd-settle-delay", 15*time.Second, "after a custom resource's storage version changes, wait this long before migrating it, so that every API server has seen the change (CRDs have no StorageVersion object to tell); 0 does not wait")
	fs.DurationVar(&o.CRDDrainMargin, "crd-drain-margin", migrate.DefaultCRDDrainMargin, "after the settle delay, wait this long more before migrating a custom resource whose storage changed: how long a write an API server accepted under the old storage version may still land in etcd (twice kube-apiserver's --request-timeout, which is 1m by default); until then svm cannot tell such a write from one in the new version")
	fs.BoolVar(&o.StorageVersionAPI, "storage-version-api", true, "where the cluster serves the StorageVersion API (internal.apiserver.k8s.io/v1alpha1), watch it and trust its common encoding version over discovery; while API servers disagree, migrations of the resource wait")
	fs.StringSliceVar(&o.EncryptedResources, "encrypted-resources", []string{"secrets"}, "resources whose objects are re-encrypted when every API server has loaded a new encryption configuration (keep in step with the resources of your EncryptionConfiguration); empty turns re-encryption off. Needs --trigger")
	fs.StringSliceVar(&o.APIServerEndpoints, "apiserver-endpoints", nil, "URLs of every API server (https://host:port), to read each one's encryption configuration from its /metrics; default: the kubeconfig's server and the addresses the API servers' identity leases publish")
	fs.DurationVar(&o.EncryptionCheckInterval, "encryption-check-interval", time.Minute, "time between looks at the API servers' encryption configurations (API servers look at their configuration file every minute)")
	return cmd
}

// Validate checks the flags.
func (o *ControllerOptions) Validate() error {
	if o.ExecutorRecheck <= 0 {
		return fmt.Errorf("--executor-recheck-interval must be positive, got %s", o.ExecutorRecheck)
	}
	if o.MaxParallel < 1 {
		return fmt.Errorf("--max-parallel must be at least 1, got %d", o.MaxParallel)
	}
	if o.Trigger && (o.TriggerInterval <= 0 || o.StaleAfter <= 0 || o.TriggerRetryDelay <= 0) {
		return fmt.Errorf("--trigger-interval, --storage-state-stale-after and --trigger-retry-delay must be positive")
	}
	var err error
	if o.executor, err = intree.ParseExecutor(o.Executor); err != nil {
		return err
	}
	if o.EncryptionCheckInterval <= 0 {
		return fmt.Errorf("--encryption-check-interval must be positive, got %s", o.EncryptionCheckInterval)
	}
	for _, r := range o.EncryptedResources {
		if strings.TrimSpace(r) == "" {
			return fmt.Errorf("--encrypted-resources has an empty name in %q", strings.Join(o.EncryptedResources, ","))
		}
	}
	if err := validateAPIServerEndpoints(o.APIServerEndpoints); err != nil {
		return err
	}
	if o.CRDSettleDelay < 0 {
		return fmt.Errorf("--crd-settle-delay must not be negative, got %s", o.CRDSettleDelay)
	}
	if o.CRDDrainMargin < 0 {
		return fmt.Errorf("--crd-drain-margin must not be negative, got %s", o.CRDDrainMargin)
	}
	return o.Engine.validate()
}

// Run runs the controller until ctx ends, then drains running migrations.
func (o *ControllerOptions) Run(ctx context.Context) error {
	cfg, err := controllerConfig(o.ConfigFlags)
	if err != nil {
		return err
	}
	ctrl.SetLogger(klog.NewKlogr())
	// Every client of svm's own is built here, once (see kubeclients);
	// controller-runtime's manager and elector build their own.
	clients, err := kubeclients.New(cfg)
	if err != nil {
		return err
	}
	if err := requireCRDs(ctx, clients); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while waiting for the CRDs, as asked: nothing started, nothing to drain
		}
		return err
	}
	if err := requireAccess(ctx, clients.Metadata, migrationsResource); err != nil {
		return err
	}
	b, err := o.newBase(ctx, clients)
	if err != nil {
		return err
	}
	betaServed, err := o.setUpMigrations(b)
	if err != nil {
		return err
	}
	if o.Trigger {
		if err := o.setUpTrigger(ctx, b, betaServed); err != nil {
			return err
		}
	}
	return b.start(ctx)
}

// controllerConfig is the client configuration of svm controller. svm's
// own bookkeeping (status writes, heartbeats, one discovery request per
// group version) must not queue behind client-go's default 5-20 requests
// per second; the migrations themselves are limited by --qps, on a
// separate client.
func controllerConfig(flags *genericclioptions.ConfigFlags) (*rest.Config, error) {
	cfg, err := restConfig(flags)
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 50, 100
	return cfg, nil
}

// controllerBase is what every controller of svm controller is set up on.
type controllerBase struct {
	clients *kubeclients.Set
	mgr     ctrl.Manager
	metrics *metrics.Metrics
	tracker *health.Tracker
}

// newBase registers svm's metrics and builds the manager, with its leader
// election lock (see electionLock) wrapped for the probes.
func (o *ControllerOptions) newBase(ctx context.Context, clients *kubeclients.Set) (*controllerBase, error) {
	cfg := clients.Config
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
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsAddress},
		HealthProbeBindAddress:        o.HealthAddress,
		GracefulShutdownTimeout:       ptr(30 * time.Second),
	}
	if o.LeaderElect {
		lock, err := o.electionLock(ctx, clients)
		if err != nil {
			return nil, err
		}
		opts.LeaderElectionNamespace = lock.namespace
		opts.LeaderElectionResourceLockInterface = tracker.WrapLock(lock.Interface)
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	return &controllerBase{clients: clients, mgr: mgr, metrics: svmMetrics, tracker: tracker}, nil
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
	return startUntilStopped(ctx, b.mgr.Start, shutdownGrace)
}

// setUpMigrations adds the migration controller, with the engine and the
// executors it runs migrations with, and tells whether the in-tree API is
// served in v1beta1 only.
func (o *ControllerOptions) setUpMigrations(b *controllerBase) (betaServed bool, _ error) {
	stallAfter := health.StallAfter(o.Engine.requestInterval(o.MaxParallel))
	m, err := o.Engine.newMigrator(b.clients.Config, b.clients.Discovery, migrator.Observers(b.metrics, b.tracker.MigrationObserver(stallAfter)))
	if err != nil {
		return false, err
	}
	choice, served, betaServed, err := o.setUpExecutors(b, m)
	if err != nil {
		return false, err
	}
	r := &migration.Reconciler{
		Client:           b.mgr.GetClient(),
		Executors:        choice,
		InTreeServed:     served,
		InTreeBetaServed: betaServed,
		Guard:            migration.APIStorageGuard{Reader: b.mgr.GetAPIReader()},
		Recorder:         b.mgr.GetEventRecorder("svm-controller"),
		Metrics:          b.metrics,
		MaxParallel:      o.MaxParallel,
	}
	if err := r.SetupWithManager(b.mgr); err != nil {
		return false, fmt.Errorf("set up migration controller: %w", err)
	}
	return betaServed, nil
}

// setUpTrigger adds the trigger, which keeps StorageStates and creates
// migrations, and the re-encryption controller unless
// --encrypted-resources is empty.
func (o *ControllerOptions) setUpTrigger(ctx context.Context, b *controllerBase, betaServed bool) error {
	mgr := b.mgr
	t := &storagestate.Controller{
		Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Discovery: b.clients.Discovery, InTreeBetaServed: betaServed,
		Interval: o.TriggerInterval, StaleAfter: o.StaleAfter, RetryBase: o.TriggerRetryDelay,
		PruneStoredVersions: o.PruneStoredVersions, MigrateUnhashed: o.MigrateUnhashed,
		SettleDelay: o.CRDSettleDelay, DrainMargin: o.CRDDrainMargin,
		Recorder: mgr.GetEventRecorder("svm-trigger"), Metrics: b.metrics, Health: b.tracker,
	}
	if o.StorageVersionAPI {
		t.StorageVersions = b.clients.Kube
	}
	if err := t.SetupWithManager(ctx, mgr); err != nil {
		return fmt.Errorf("set up trigger: %w", err)
	}
	if len(o.EncryptedResources) > 0 {
		return o.setUpEncryption(ctx, b)
	}
	return nil
}

// validateAPIServerEndpoints checks --apiserver-endpoints of svm
// controller and svm status: https URLs with a host, as API servers serve.
func validateAPIServerEndpoints(endpoints []string) error {
	for _, e := range endpoints {
		if u, err := url.Parse(e); err != nil || u.Scheme != "https" || u.Host == "" {
			return fmt.Errorf("--apiserver-endpoints: %q is not an https://host:port URL", e)
		}
	}
	return nil
}

// setUpEncryption adds the re-encryption controller.
func (o *ControllerOptions) setUpEncryption(ctx context.Context, b *controllerBase) error {
	mgr := b.mgr
	e := &encryption.Controller{
		Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Leases: b.clients.Kube.CoordinationV1(), Discovery: b.clients.Discovery,
		Servers: b.clients.Servers, Endpoints: o.APIServerEndpoints, Resources: o.EncryptedResources,
		Interval: o.EncryptionCheckInterval, RetryBase: o.TriggerRetryDelay,
		Recorder: mgr.GetEventRecorder("svm-encryption"), Metrics: b.metrics, Health: b.tracker,
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
func (o *ControllerOptions) setUpExecutors(b *controllerBase, m *migrator.Migrator) (_ *migration.Choice, served, betaServed bool, _ error) {
	served, betaServed, err := inTreeAPI(b.clients)
	if err != nil {
		return nil, false, false, err
	}
	engine, inTree := newExecutors(b.clients, b.mgr, m)
	choice := &migration.Choice{}
	chooser := &migration.Chooser{
		Asked: o.executor, Served: served, BetaServed: betaServed, Choice: choice, Metrics: b.metrics, Recheck: o.ExecutorRecheck,
		Prober: intree.Prober{Client: b.mgr.GetClient(), Reader: b.mgr.GetAPIReader()},
		Engine: engine,
		InTree: inTree,
	}
	if _, _, err := intree.Choose(o.executor, served, &intree.Verdict{}); err != nil {
		return nil, false, false, err // --executor=in-tree where it is not served: say so now
	}
	return choice, served, betaServed, b.mgr.Add(chooser)
}

// newExecutors builds the two executors a chooser chooses from: svm's
// engine m, and the hand-over to kube-controller-manager, which falls back
// to it. Both mark a custom resource's CRD while they migrate it.
func newExecutors(clients *kubeclients.Set, mgr ctrl.Manager, m *migrator.Migrator) (migration.EngineExecutor, migration.InTreeExecutor) {
	marker := &migration.CRDMarker{Reader: mgr.GetAPIReader(), CRDs: clients.CRDs.ApiextensionsV1().CustomResourceDefinitions(), Objects: clients.Dynamic}
	engine := migration.EngineExecutor{Migrator: m, CRDs: marker}
	inTree := migration.InTreeExecutor{
		Client: mgr.GetClient(), Reader: mgr.GetClient(), Lookup: m.Lookup, Fallback: engine, Engine: m, CRDs: marker,
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
