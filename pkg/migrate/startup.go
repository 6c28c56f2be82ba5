package migrate

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// Defaults of StartupOptions.
const (
	DefaultStartupTimeout  = 30 * time.Minute
	DefaultStartupAttempts = 5
	DefaultRetryDelay      = 5 * time.Second
	// maxRetryDelay caps the doubling of the delay between retries.
	maxRetryDelay = time.Minute
)

// StartupOptions tune a StartupMigrator.
type StartupOptions struct {
	// Options tune each CRD's migration.
	Options
	// Timeout bounds the whole run, every CRD and retry included; CRDs
	// not migrated by then are reported with the context's error.
	// 0 means DefaultStartupTimeout.
	Timeout time.Duration
	// Attempts bounds how often a CRD is tried when every try fails with
	// a transient error (see IsTransient); other errors are not retried.
	// 0 means DefaultStartupAttempts.
	Attempts int
	// RetryDelay is the wait before the first retry, doubled before each
	// next one, up to a minute. 0 means DefaultRetryDelay.
	RetryDelay time.Duration
	// OnResult, if set, is told how each CRD ended, once per CRD, in the
	// order given, with what CRD returned on its last try. It is called
	// for CRDs not tried because the run timed out or was stopped, too.
	OnResult func(CRDResult, error)
}

// StartupMigrator migrates a few CRDs, one after another, once, when a
// controller-runtime manager starts it: add it with mgr.Add. It is meant
// for an operator whose new release changes the storage version of its own
// CRDs: the first leader to start after the upgrade migrates their objects
// and prunes storedVersions, so that the next release may drop the old
// versions.
//
// It needs leader election (NeedLeaderElection is true), so that two
// replicas do not migrate at once. Start returns nil whatever happened to
// the CRDs: a failed migration is reported, never a reason to stop the
// manager. Start returns soon after its context ends, so it never holds up
// the manager's shutdown; a migration cut short is resumed, at the cost of
// the writes still needed, the next time the manager starts.
//
// It logs through the logger of the context Start is given or, when it has
// none (a manager's runnables get none unless its Options.BaseContext
// gives one), through controller-runtime's global logger, the one
// ctrl.SetLogger sets; and it tells StartupOptions.OnResult.
type StartupMigrator struct {
	crds     []string
	opts     StartupOptions
	migrate  func(ctx context.Context, name string) (CRDResult, error)
	newTimer func(time.Duration) (<-chan time.Time, func() bool)
}

// NewStartupMigrator returns a StartupMigrator for the named CRDs, which
// talks to the API server cfg points at.
func NewStartupMigrator(cfg *rest.Config, crdNames []string, opts StartupOptions) *StartupMigrator {
	return newStartupMigrator(crdNames, opts, func(ctx context.Context, name string) (CRDResult, error) {
		return CRD(ctx, cfg, name, opts.Options)
	})
}

func newStartupMigrator(crdNames []string, opts StartupOptions, migrate func(context.Context, string) (CRDResult, error)) *StartupMigrator {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultStartupTimeout
	}
	if opts.Attempts <= 0 {
		opts.Attempts = DefaultStartupAttempts
	}
	if opts.RetryDelay <= 0 {
		opts.RetryDelay = DefaultRetryDelay
	}
	return &StartupMigrator{
		crds:    slices.Clone(crdNames),
		opts:    opts,
		migrate: migrate,
		newTimer: func(d time.Duration) (<-chan time.Time, func() bool) {
			t := time.NewTimer(d)
			return t.C, t.Stop
		},
	}
}

// NeedLeaderElection implements controller-runtime's
// manager.LeaderElectionRunnable: only the leader migrates.
func (s *StartupMigrator) NeedLeaderElection() bool { return true }

// errTimedOut is the cause of a run that outlived StartupOptions.Timeout.
var errTimedOut = errors.New("storage version migration at startup timed out")

// timedOut says that StartupOptions.Timeout ran out. It is a context
// deadline too, so that IsTransient treats it as one.
type timedOut struct{ after time.Duration }

func (e timedOut) Error() string { return fmt.Sprintf("%v after %s", errTimedOut, e.after) }

func (e timedOut) Is(target error) bool {
	return target == errTimedOut || target == context.DeadlineExceeded
}

// Start implements controller-runtime's manager.Runnable: it migrates
// every CRD in turn, then returns nil.
func (s *StartupMigrator) Start(ctx context.Context) error {
	log := ctrllog.FromContext(ctx).WithName("storage-version-migration")
	stopped := ctx
	ctx, cancel := context.WithTimeoutCause(ctx, s.opts.Timeout, timedOut{s.opts.Timeout})
	defer cancel()
	log.Info("Migrating CRDs", "crds", s.crds, "timeout", s.opts.Timeout)
	for _, name := range s.crds {
		var res CRDResult
		var err error
		if ctx.Err() != nil {
			res, err = CRDResult{Name: name, NotPrunedReason: "not tried"}, fmt.Errorf("customresourcedefinition %s not tried: %w", name, context.Cause(ctx))
		} else {
			res, err = s.withRetries(ctx, log, name)
			if err != nil && errors.Is(context.Cause(ctx), errTimedOut) && !errors.Is(err, errTimedOut) {
				// The engine says only "context deadline exceeded".
				err = fmt.Errorf("%w: %w", err, context.Cause(ctx))
			}
		}
		s.report(log, stopped.Err() != nil, res, err)
	}
	return nil
}

// withRetries migrates one CRD, trying again after transient errors.
func (s *StartupMigrator) withRetries(ctx context.Context, log logr.Logger, name string) (CRDResult, error) {
	delay := s.opts.RetryDelay
	for attempt := 1; ; attempt++ {
		res, err := s.migrate(ctx, name)
		if !IsTransient(err) || attempt >= s.opts.Attempts {
			return res, err
		}
		log.Info("Retrying CRD after a transient error", "crd", name, "attempt", attempt, "retryIn", delay, "error", err.Error())
		wait, stop := s.newTimer(delay)
		select {
		case <-ctx.Done():
			stop()
			return res, fmt.Errorf("%w; not retried: %w", err, context.Cause(ctx))
		case <-wait:
		}
		delay = min(2*delay, maxRetryDelay)
	}
}

// report logs how a CRD ended and tells OnResult. A CRD cut short by the
// manager's shutdown is no failure: it is logged as information.
func (s *StartupMigrator) report(log logr.Logger, shuttingDown bool, res CRDResult, err error) {
	kv := []any{"crd", res.Name, "migrated", res.Migration != nil, "pruned", res.Pruned, "storedVersions", res.StoredVersionsAfter}
	if res.Migration != nil {
		c := res.Migration.Counts
		kv = append(kv, "listed", c.Listed, "restored", c.Restored, "alreadyCurrent", c.AlreadyCurrent,
			"writtenSinceStart", c.WrittenSinceStart, "gone", c.Gone, "failed", c.Failed)
	}
	if res.NotPrunedReason != "" {
		kv = append(kv, "notPrunedReason", res.NotPrunedReason)
	}
	var terminal *TerminalError
	switch {
	case err == nil && res.Pruned:
		log.Info("Migrated CRD and pruned its storedVersions", kv...)
	case err == nil:
		log.Info("CRD needs no migration", kv...)
	case shuttingDown:
		log.Info("Stopped before the CRD was migrated", append(kv, "error", err.Error())...)
	case errors.As(err, &terminal):
		log.Error(err, "CRD not migrated", append(kv, "reason", terminal.Reason)...)
	default:
		log.Error(err, "CRD not migrated", kv...)
	}
	if s.opts.OnResult != nil {
		s.opts.OnResult(res, err)
	}
}
