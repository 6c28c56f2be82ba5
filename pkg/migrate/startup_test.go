package migrate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// An operator adds it to its manager, which runs it on the leader only.
var (
	_ manager.Runnable               = (*StartupMigrator)(nil)
	_ manager.LeaderElectionRunnable = (*StartupMigrator)(nil)
)

var (
	errOutage    = fmt.Errorf("migrate widgets.example.com: %w", apierrors.NewServiceUnavailable("busy"))
	errForbidden = &TerminalError{Reason: ReasonForbidden, Err: errors.New("forbidden")}
)

// fakeRuns answers the calls of a StartupMigrator's migrate, one answer
// per call and CRD in turn, and records them.
type fakeRuns struct {
	mu      sync.Mutex
	answers map[string][]error
	calls   []string
}

func (f *fakeRuns) migrate(_ context.Context, name string) (CRDResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name)
	answers := f.answers[name]
	if len(answers) == 0 {
		return CRDResult{Name: name, Migration: &Result{}, Pruned: true, StoredVersionsAfter: []string{"v2"}}, nil
	}
	err := answers[0]
	f.answers[name] = answers[1:]
	return CRDResult{Name: name, Migration: &Result{}, NotPrunedReason: "the migration did not complete"}, err
}

// outcome is what OnResult was told about one CRD.
type outcome struct {
	Name    string
	Pruned  bool
	ErrText string
}

// startupRun runs a StartupMigrator over crds with the fake's answers and
// timers that fire at once, and returns what OnResult was told, the
// delays waited before retries, and the log.
func startupRun(t *testing.T, ctx context.Context, crds []string, opts StartupOptions, fake *fakeRuns) ([]outcome, []time.Duration, string) {
	t.Helper()
	var got []outcome
	opts.OnResult = func(res CRDResult, err error) {
		o := outcome{Name: res.Name, Pruned: res.Pruned}
		if err != nil {
			o.ErrText = err.Error()
		}
		got = append(got, o)
	}
	var log strings.Builder
	ctx = logr.NewContext(ctx, funcr.New(func(prefix, args string) { fmt.Fprintln(&log, prefix, args) }, funcr.Options{}))
	s := newStartupMigrator(crds, opts, fake.migrate)
	var delays []time.Duration
	s.newTimer = func(d time.Duration) (<-chan time.Time, func() bool) {
		delays = append(delays, d)
		fired := make(chan time.Time, 1)
		fired <- time.Time{}
		return fired, func() bool { return false }
	}
	if err := s.Start(ctx); err != nil {
		t.Fatalf("Start = %v, want nil: a failed migration must not stop the manager", err)
	}
	return got, delays, log.String()
}

func TestStartupMigratorRetries(t *testing.T) {
	tests := []struct {
		name       string
		opts       StartupOptions
		answers    map[string][]error
		wantCalls  []string
		wantDelays []time.Duration
		wantResult []outcome
		wantLog    []string
	}{
		{
			name:       "every CRD in order, once",
			answers:    map[string][]error{},
			wantCalls:  []string{"a", "b"},
			wantResult: []outcome{{Name: "a", Pruned: true}, {Name: "b", Pruned: true}},
			wantLog:    []string{`"msg"="Migrating CRDs"`, `"msg"="Migrated CRD and pruned its storedVersions" "crd"="a"`},
		},
		{
			name:       "a transient error is retried with a doubling delay",
			answers:    map[string][]error{"a": {errOutage, errOutage}},
			wantCalls:  []string{"a", "a", "a", "b"},
			wantDelays: []time.Duration{5 * time.Second, 10 * time.Second},
			wantResult: []outcome{{Name: "a", Pruned: true}, {Name: "b", Pruned: true}},
			wantLog:    []string{`"msg"="Retrying CRD after a transient error" "crd"="a" "attempt"=2`},
		},
		{
			name:       "retries are bounded, and the delay capped",
			opts:       StartupOptions{Attempts: 4, RetryDelay: 40 * time.Second},
			answers:    map[string][]error{"a": {errOutage, errOutage, errOutage, errOutage, errOutage}},
			wantCalls:  []string{"a", "a", "a", "a", "b"},
			wantDelays: []time.Duration{40 * time.Second, time.Minute, time.Minute},
			wantResult: []outcome{{Name: "a", ErrText: errOutage.Error()}, {Name: "b", Pruned: true}},
			wantLog:    []string{`"msg"="CRD not migrated" "error"="` + errOutage.Error() + `" "crd"="a"`},
		},
		{
			name:       "a terminal error is not retried",
			answers:    map[string][]error{"a": {errForbidden}},
			wantCalls:  []string{"a", "b"},
			wantResult: []outcome{{Name: "a", ErrText: "forbidden"}, {Name: "b", Pruned: true}},
			wantLog:    []string{`"reason"="Forbidden"`},
		},
		{
			name:       "failed objects are not retried",
			answers:    map[string][]error{"b": {&ObjectsFailedError{Count: 2}}},
			wantCalls:  []string{"a", "b"},
			wantResult: []outcome{{Name: "a", Pruned: true}, {Name: "b", ErrText: "2 objects could not be rewritten"}},
		},
		{
			name:       "a CRD changed during its migration is tried again",
			answers:    map[string][]error{"a": {fmt.Errorf("customresourcedefinition a: %w: why", ErrCRDChanged)}},
			wantCalls:  []string{"a", "a", "b"},
			wantDelays: []time.Duration{5 * time.Second},
			wantResult: []outcome{{Name: "a", Pruned: true}, {Name: "b", Pruned: true}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := &fakeRuns{answers: tt.answers}
			got, delays, log := startupRun(t, t.Context(), []string{"a", "b"}, tt.opts, fake)
			if diff := cmp.Diff(tt.wantCalls, fake.calls); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantDelays, delays); diff != "" {
				t.Errorf("delays before retries (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantResult, got); diff != "" {
				t.Errorf("OnResult was told (-want +got):\n%s", diff)
			}
			for _, want := range tt.wantLog {
				if !strings.Contains(log, want) {
					t.Errorf("log lacks %s:\n%s", want, log)
				}
			}
		})
	}
}

func TestStartupMigratorStopsWithItsContext(t *testing.T) {
	t.Run("cancelled before it starts: nothing is tried, every CRD is reported", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		fake := &fakeRuns{answers: map[string][]error{}}
		got, _, log := startupRun(t, ctx, []string{"a", "b"}, StartupOptions{}, fake)
		if len(fake.calls) != 0 {
			t.Errorf("migrated %v after the context ended", fake.calls)
		}
		want := []outcome{
			{Name: "a", ErrText: "customresourcedefinition a not tried: context canceled"},
			{Name: "b", ErrText: "customresourcedefinition b not tried: context canceled"},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("OnResult was told (-want +got):\n%s", diff)
		}
		// A shutdown is no failure.
		if strings.Contains(log, "CRD not migrated") || !strings.Contains(log, `"msg"="Stopped before the CRD was migrated" "crd"="a"`) {
			t.Errorf("log of a shutdown:\n%s", log)
		}
	})

	t.Run("cancelled while waiting to retry: returns at once", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var calls int
		s := newStartupMigrator([]string{"a", "b"}, StartupOptions{}, func(context.Context, string) (CRDResult, error) {
			calls++
			cancel() // the manager shuts down during the first try
			return CRDResult{Name: "a"}, errOutage
		})
		s.newTimer = func(time.Duration) (<-chan time.Time, func() bool) { return nil, func() bool { return true } } // never fires
		var errs []error
		s.opts.OnResult = func(_ CRDResult, err error) { errs = append(errs, err) }
		done := make(chan error, 1)
		go func() { done <- s.Start(logr.NewContext(ctx, logr.Discard())) }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Start = %v, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Start did not return after its context ended")
		}
		if calls != 1 {
			t.Errorf("migrate was called %d times, want 1", calls)
		}
		if len(errs) != 2 || !errors.Is(errs[0], context.Canceled) || !errors.Is(errs[0], errOutage) || !errors.Is(errs[1], context.Canceled) {
			t.Errorf("OnResult was told %v, want the outage and the cancellation for a, the cancellation for b", errs)
		}
	})

	t.Run("timed out: the CRD in flight and those after it are reported", func(t *testing.T) {
		fake := func(ctx context.Context, name string) (CRDResult, error) {
			<-ctx.Done() // a migration that takes longer than the timeout
			return CRDResult{Name: name}, fmt.Errorf("migrate %s: %w", name, ctx.Err())
		}
		s := newStartupMigrator([]string{"a", "b"}, StartupOptions{Timeout: 50 * time.Millisecond}, fake)
		var errs []error
		s.opts.OnResult = func(_ CRDResult, err error) { errs = append(errs, err) }
		if err := s.Start(logr.NewContext(t.Context(), logr.Discard())); err != nil {
			t.Fatalf("Start = %v, want nil", err)
		}
		if len(errs) != 2 {
			t.Fatalf("OnResult was told %d times, want 2: %v", len(errs), errs)
		}
		for i, err := range errs {
			if !errors.Is(err, errTimedOut) || IsTransient(err) {
				t.Errorf("CRD %d: error %v, want the timeout, not transient", i, err)
			}
		}
	})
}

func TestNewStartupMigratorDefaults(t *testing.T) {
	s := NewStartupMigrator(nil, []string{"a"}, StartupOptions{})
	if !s.NeedLeaderElection() {
		t.Error("NeedLeaderElection = false: every replica would migrate")
	}
	want := StartupOptions{Timeout: DefaultStartupTimeout, Attempts: DefaultStartupAttempts, RetryDelay: DefaultRetryDelay}
	if s.opts.Timeout != want.Timeout || s.opts.Attempts != want.Attempts || s.opts.RetryDelay != want.RetryDelay {
		t.Errorf("defaults = %v, %d, %v; want %v, %d, %v", s.opts.Timeout, s.opts.Attempts, s.opts.RetryDelay, want.Timeout, want.Attempts, want.RetryDelay)
	}
	// Without a rest.Config, every CRD is reported, and nothing panics.
	var errs []error
	s.opts.OnResult = func(_ CRDResult, err error) { errs = append(errs, err) }
	if err := s.Start(logr.NewContext(t.Context(), logr.Discard())); err != nil {
		t.Fatalf("Start = %v", err)
	}
	var terminal *TerminalError
	if len(errs) != 1 || !errors.As(errs[0], &terminal) || terminal.Reason != ReasonInvalidOptions {
		t.Errorf("OnResult was told %v, want one %s error", errs, ReasonInvalidOptions)
	}
}
