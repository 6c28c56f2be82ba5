package cli

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/svm-project/svm/internal/controller/history"
	"github.com/svm-project/svm/internal/controller/manager"
	"github.com/svm-project/svm/internal/intree"
	"github.com/svm-project/svm/internal/kubeclients"
	"github.com/svm-project/svm/pkg/migrate"
)

// ControllerOptions are the options of `svm controller`: its flags, set
// in the manager.Config they are handed over in, and the engine's.
type ControllerOptions struct {
	manager.Config
	Engine EngineFlags
	// Executor is --executor as given; Config.Executor is it parsed.
	Executor string
}

func newControllerCommand(configFlags *genericclioptions.ConfigFlags) *cobra.Command {
	o := &ControllerOptions{Config: manager.Config{ConfigFlags: configFlags}}
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the controller that executes StorageVersionMigrations",
		Args:  cobra.NoArgs,
		RunE:  runOptions(o, func(ctx context.Context) (int, error) { return 0, o.Run(ctx) }),
	}
	o.Engine.addFlags(cmd.Flags())
	fs := cmd.Flags()
	fs.IntVar(&o.MaxParallel, "max-parallel", 8, "resources migrated at the same time")
	fs.StringVar(&o.Executor, "executor", string(intree.ExecutorAuto), "who rewrites the objects of svm's migrations: svm, in-tree (kube-controller-manager) or auto (in-tree where it runs)")
	fs.DurationVar(&o.ExecutorRecheck, "executor-recheck-interval", 30*time.Second, "with --executor=auto, how often to look again at kube-controller-manager's lease")
	fs.BoolVar(&o.LeaderElect, "leader-elect", true, "elect a leader so that only one replica migrates")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election lease (default: the pod's, or else kubectl's)")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", ":8080", "address of the metrics endpoint (0: off)")
	fs.StringVar(&o.HealthAddress, "health-probe-bind-address", ":8081", "address of the health and readiness endpoints (0: off)")
	fs.BoolVar(&o.Profiling, "profiling", false, "serve Go's profiles (net/http/pprof) under /debug/pprof/ on the metrics endpoint")
	fs.BoolVar(&o.Trigger, "trigger", true, "keep StorageStates and start migrations when storage versions change")
	fs.DurationVar(&o.TriggerInterval, "trigger-interval", 10*time.Minute, "time between discovery rounds of the trigger")
	fs.DurationVar(&o.StaleAfter, "storage-state-stale-after", 10*time.Minute, "at start, StorageStates whose heartbeat is older are reset to Unknown")
	fs.BoolVar(&o.PruneStoredVersions, "prune-stored-versions", true, "after a successful triggered migration of a custom resource, cut its CRD's status.storedVersions to the storage version")
	fs.BoolVar(&o.ThroughStatus, "through-status", false, "the trigger's migrations write an object that admission refuses through its status subresource (spec.throughStatus)")
	fs.BoolVar(&o.MigrateUnhashed, "migrate-unhashed", true, "migrate once, when first seen, every resource whose discovery reports no storage version hash")
	fs.DurationVar(&o.TriggerRetryDelay, "trigger-retry-delay", time.Minute, "delay before a failed triggered migration is followed by a new one, doubling per failure up to an hour")
	fs.DurationVar(&o.CRDSettleDelay, "crd-settle-delay", 15*time.Second, "after a custom resource's storage version changes, wait this long for every API server to see it (0: no wait)")
	fs.DurationVar(&o.CRDDrainMargin, "crd-drain-margin", migrate.DefaultCRDDrainMargin, "after the settle delay, wait this long more for writes under the old storage version to land (twice kube-apiserver's --request-timeout)")
	fs.BoolVar(&o.StorageVersionAPI, "storage-version-api", true, "watch the StorageVersion API where the cluster serves it, and trust it over discovery")
	fs.StringSliceVar(&o.EncryptedResources, "encrypted-resources", []string{"secrets"}, "resources re-encrypted once every API server has loaded a new encryption configuration (empty: none)")
	fs.StringSliceVar(&o.APIServerEndpoints, "apiserver-endpoints", nil, "URLs of every API server (https://host:port) (default: the kubeconfig's server and the identity leases' addresses)")
	fs.IntVar(&o.SucceededMigrationsKept, "succeeded-migrations-kept", history.DefaultSucceeded, "Succeeded StorageVersionMigrations kept per resource, the newest, besides any svm still reads")
	fs.IntVar(&o.FailedMigrationsKept, "failed-migrations-kept", history.DefaultFailed, "Failed StorageVersionMigrations kept per resource, the newest, besides any svm still reads")
	fs.DurationVar(&o.EncryptionCheckInterval, "encryption-check-interval", time.Minute, "time between looks at the API servers' encryption configurations")
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
	if o.Config.Executor, err = intree.ParseExecutor(o.Executor); err != nil {
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
	if o.SucceededMigrationsKept < 0 {
		return fmt.Errorf("--succeeded-migrations-kept must not be negative, got %d (0 keeps only the Succeeded migrations svm still reads)", o.SucceededMigrationsKept)
	}
	if o.FailedMigrationsKept < 0 {
		return fmt.Errorf("--failed-migrations-kept must not be negative, got %d (0 keeps only the Failed migrations svm still reads)", o.FailedMigrationsKept)
	}
	return o.Engine.validate()
}

// Complete loads the client configuration and builds the process's
// clients: every client of svm's own is built here, once (see
// kubeclients); controller-runtime's manager and elector build their own.
// It sends no request.
func (o *ControllerOptions) Complete() error {
	cfg, err := controllerConfig(o.ConfigFlags)
	if err != nil {
		return err
	}
	if o.Clients, err = kubeclients.New(cfg); err != nil {
		return err
	}
	o.Tuning = o.Engine.tuning()
	return nil
}

// Run runs the controller until ctx ends, then drains running migrations
// (see package manager).
func (o *ControllerOptions) Run(ctx context.Context) error {
	ctrl.SetLogger(klog.NewKlogr())
	o.RequestInterval = o.Engine.requestInterval(o.MaxParallel)
	return manager.Run(ctx, o.Config)
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
