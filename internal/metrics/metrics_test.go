package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/svm-project/svm/internal/migrator"
)

var (
	widgets = schema.GroupResource{Group: "example.com", Resource: "widgets"}
	secrets = schema.GroupResource{Resource: "secrets"}
)

func TestErrorReason(t *testing.T) {
	gr := widgets
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"conflict", apierrors.NewConflict(gr, "w1", errors.New("the object has been modified")), "conflict"},
		{"not found", apierrors.NewNotFound(gr, "w1"), "not_found"},
		{"gone", apierrors.NewGone("too old"), "gone"},
		{"expired", apierrors.NewResourceExpired("continue token expired"), "gone"},
		{"throttled", apierrors.NewTooManyRequests("slow down", 1), "throttled"},
		{"server timeout", apierrors.NewServerTimeout(gr, "patch", 1), "timeout"},
		{"gateway timeout", apierrors.NewTimeoutError("slow", 1), "timeout"},
		{"deadline", fmt.Errorf("patch: %w", context.DeadlineExceeded), "timeout"},
		{"net timeout", &net.OpError{Op: "read", Err: timeoutError{}}, "timeout"},
		{"internal error", apierrors.NewInternalError(errors.New("etcd down")), "server_error"},
		{"service unavailable", apierrors.NewServiceUnavailable("starting"), "server_error"},
		{"forbidden", apierrors.NewForbidden(gr, "w1", errors.New(`admission webhook "deny.example.com" denied the request`)), "forbidden"},
		{"unauthorized", apierrors.NewUnauthorized("token expired"), "unauthorized"},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "Widget"}, "w1", nil), "invalid"},
		{"bad request", apierrors.NewBadRequest("bad patch"), "bad_request"},
		{"method not allowed", apierrors.NewMethodNotSupported(gr, "patch"), "method_not_allowed"},
		{"canceled", fmt.Errorf("list: %w", context.Canceled), "canceled"},
		{"connection reset", fmt.Errorf("patch: %w", syscall.ECONNRESET), "connection"},
		{"connection refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, "connection"},
		{"unexpected EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), "connection"},
		{"other status", apierrors.NewAlreadyExists(gr, "w1"), "other"},
		{"unknown", errors.New("something odd"), "other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ErrorReason(tt.err); got != tt.want {
				t.Errorf("ErrorReason(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }

// TestObserver drives the engine's observer through a migration the way
// the engine does and checks that every value moves.
func TestObserver(t *testing.T) {
	m := New()
	var o migrator.Observer = m
	const w = "widgets.example.com"

	o.RunStarted(widgets)
	expectValue(t, "running", m.runningMigrations.WithLabelValues(w), 1)
	o.Listed(widgets, 500, ptr(int64(1500)))
	expectValue(t, "listed", m.listedObjects.WithLabelValues(w), 500)
	expectValue(t, "remaining", m.remainingObjects.WithLabelValues(w), 1500)
	for range 3 {
		o.LimiterWaited(widgets, 20*time.Millisecond)
		o.Requested(widgets, "patch", nil)
		o.ObjectMigrated(widgets, true)
	}
	o.ObjectMigrated(widgets, false)
	o.Requested(widgets, "patch", apierrors.NewTooManyRequests("slow down", 1))
	o.Retry(widgets, apierrors.NewTooManyRequests("slow down", 1))
	o.Requested(widgets, "patch", apierrors.NewConflict(widgets, "w1", errors.New("modified")))
	o.ObjectSkipped(widgets, migrator.SkipWrittenSinceStart, apierrors.NewConflict(widgets, "w1", errors.New("modified")))
	o.ObjectSkipped(widgets, migrator.SkipWrittenSinceStart, nil)
	o.ObjectSkipped(widgets, migrator.SkipWrittenSinceChange, nil)
	o.ObjectSkipped(widgets, migrator.SkipGone, nil)
	o.ObjectFailed(widgets, apierrors.NewForbidden(widgets, "w2", errors.New("denied")))
	o.Requested(widgets, "list", nil)
	o.Listed(widgets, 2000, ptr(int64(0)))
	o.ObjectMigrated(secrets, true)

	expectValue(t, "migrated", m.migratedObjects.WithLabelValues(w), 4)
	expectValue(t, "restored", m.objects.WithLabelValues(w, OutcomeRestored), 3)
	expectValue(t, "already current", m.objects.WithLabelValues(w, OutcomeAlreadyCurrent), 1)
	expectValue(t, "written since start", m.objects.WithLabelValues(w, OutcomeWrittenSinceStart), 2)
	expectValue(t, "written since change", m.objects.WithLabelValues(w, OutcomeWrittenSinceChange), 1)
	expectValue(t, "skipped newer than the change", m.skippedObjects.WithLabelValues(w, SkipNewerThanStorageChange), 1)
	expectValue(t, "gone", m.objects.WithLabelValues(w, OutcomeGone), 1)
	expectValue(t, "failed outcome", m.objects.WithLabelValues(w, OutcomeFailed), 1)
	expectValue(t, "migrated secrets", m.migratedObjects.WithLabelValues("secrets"), 1)
	expectValue(t, "listed", m.listedObjects.WithLabelValues(w), 2000)
	expectValue(t, "remaining", m.remainingObjects.WithLabelValues(w), 0)
	expectValue(t, "patches", m.requests.WithLabelValues(w, "patch"), 5)
	expectValue(t, "lists", m.requests.WithLabelValues(w, "list"), 1)
	expectValue(t, "retries", m.retries.WithLabelValues(w, "throttled"), 1)
	expectValue(t, "skipped conflict", m.skippedObjects.WithLabelValues(w, "conflict"), 1)
	expectValue(t, "skipped newer", m.skippedObjects.WithLabelValues(w, SkipNewerThanCheckpoint), 2)
	expectValue(t, "failed", m.failedObjects.WithLabelValues(w, "forbidden"), 1)
	if n := testutil.CollectAndCount(m.limiterWait); n != 1 {
		t.Errorf("limiter wait histogram has %d series, want 1", n)
	}
	expectHistogram(t, m.limiterWait, 3, 0.06)

	o.Listed(widgets, 2500, ptr(int64(700)))
	o.Paced(widgets, migrator.PacerState{InFlight: 3, Window: 8, SmoothedLatency: 20 * time.Millisecond, Knee: 6, Decision: migrator.PacerKnee})
	expectValue(t, "window while running", m.pacerWindow.WithLabelValues(w), 8)
	expectValue(t, "knee decisions", m.pacerDecisions.WithLabelValues(string(migrator.PacerKnee)), 1)
	o.RunEnded(widgets, nil)
	// The gauges of the run go with it, its listed count too.
	for name, g := range map[string]*prometheus.GaugeVec{"running": m.runningMigrations, "listed": m.listedObjects, "remaining": m.remainingObjects,
		"in flight": m.pacerInFlight, "window": m.pacerWindow, "latency": m.pacerLatency, "knee": m.pacerKnee} {
		if n := testutil.CollectAndCount(g); n != 0 {
			t.Errorf("%s: %d series after the run ended, want none", name, n)
		}
	}

	m.MigrationFinished(widgets, StatusSucceeded, 90*time.Second)
	expectValue(t, "succeeded", m.migrations.WithLabelValues(w, StatusSucceeded), 1)
	expectValue(t, "failed migrations", m.migrations.WithLabelValues(w, StatusFailed), 0)
	m.MigrationFinished(secrets, StatusSucceeded, 10*time.Second)
	// The duration is by status alone: one series for both resources.
	expectHistogram(t, m.migrationDuration.WithLabelValues(StatusSucceeded).(prometheus.Histogram), 2, 100)
}

func TestTriggerMetrics(t *testing.T) {
	m := New()
	m.DiscoveryPolled(nil, 0)
	m.DiscoveryPolled(nil, 2)
	m.DiscoveryPolled(errors.New("discovery down"), 0)
	expectValue(t, "polls", m.discoveryPolls, 3)
	expectValue(t, "round errors", m.discoveryErrors.WithLabelValues("round"), 1)
	expectValue(t, "group errors", m.discoveryErrors.WithLabelValues("group"), 2)

	m.StorageStateTransition(widgets, TransitionCreated)
	m.StorageStateTransition(widgets, TransitionMigrated)
	m.StorageStateTransition(secrets, TransitionMigrated)
	expectValue(t, "created", m.stateTransitions.WithLabelValues(TransitionCreated), 1)
	expectValue(t, "migrated", m.stateTransitions.WithLabelValues(TransitionMigrated), 2)
}

func TestEncryption(t *testing.T) {
	m := New()
	m.EncryptionChecked(false, []EncryptionServer{{IDHash: "sha256:a", ConfigHash: "sha256:c1", Reached: true}, {IDHash: "sha256:b"}})
	expectValue(t, "not agreed", m.encryptionAgreed.WithLabelValues(), 0)
	expectValue(t, "server a", m.encryptionServers.WithLabelValues("sha256:a", "sha256:c1", "true"), 1)
	expectValue(t, "server b, not reached", m.encryptionServers.WithLabelValues("sha256:b", "", "false"), 1)
	// A later look replaces the servers: a's old configuration is gone.
	m.EncryptionChecked(true, []EncryptionServer{{IDHash: "sha256:a", ConfigHash: "sha256:c2", Reached: true}})
	expectValue(t, "agreed", m.encryptionAgreed.WithLabelValues(), 1)
	if n := testutil.CollectAndCount(m.encryptionServers); n != 1 {
		t.Errorf("%d apiserver_config_info series after the second look, want 1", n)
	}
	m.ResourceRewritten(secrets, false)
	expectValue(t, "secrets not rewritten", m.encryptionRewritten.WithLabelValues("secrets"), 0)
	m.ResourceRewritten(secrets, true)
	expectValue(t, "secrets rewritten", m.encryptionRewritten.WithLabelValues("secrets"), 1)
	m.ReencryptionCreated(secrets)
	m.ReencryptionCreated(secrets)
	expectValue(t, "re-encryptions", m.reencryptions.WithLabelValues("secrets"), 2)
}

// TestRegister checks that every metric is served under the names the
// package doc lists.
func TestRegister(t *testing.T) {
	m := New()
	reg := prometheus.NewPedanticRegistry()
	if err := m.Register(reg); err != nil {
		t.Fatal(err)
	}
	// Vectors are exported once they have a series.
	m.RunStarted(widgets)
	m.Listed(widgets, 1, ptr(int64(1)))
	m.Requested(widgets, "patch", nil)
	m.ObjectMigrated(widgets, true)
	m.ObjectSkipped(widgets, migrator.SkipGone, nil)
	m.ExecutorChosen("svm")
	m.ObjectFailed(widgets, errors.New("x"))
	m.Retry(widgets, errors.New("x"))
	m.LimiterWaited(widgets, time.Millisecond)
	m.MigrationFinished(widgets, StatusFailed, time.Second)
	m.DiscoveryPolled(errors.New("x"), 0)
	m.StorageStateTransition(widgets, TransitionReset)
	m.EncryptionChecked(true, []EncryptionServer{{IDHash: "sha256:a", ConfigHash: "sha256:c", Reached: true}})
	m.ResourceRewritten(secrets, true)
	m.ReencryptionCreated(secrets)

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range families {
		got = append(got, f.GetName())
	}
	want := []string{
		"storage_migrator_core_migrator_failed_objects_total",
		"storage_migrator_core_migrator_listed_objects",
		"storage_migrator_core_migrator_migrated_objects",
		"storage_migrator_core_migrator_migration_duration_seconds",
		"storage_migrator_core_migrator_migrations",
		"storage_migrator_core_migrator_objects_total",
		"storage_migrator_core_migrator_rate_limiter_wait_seconds",
		"storage_migrator_core_migrator_remaining_objects",
		"storage_migrator_core_migrator_requests_total",
		"storage_migrator_core_migrator_retries_total",
		"storage_migrator_core_migrator_running_migrations",
		"storage_migrator_core_migrator_skipped_objects_total",
		"storage_migrator_encryption_apiserver_config_info",
		"storage_migrator_encryption_config_agreed",
		"storage_migrator_encryption_reencryptions_total",
		"storage_migrator_encryption_resource_rewritten",
		"storage_migrator_executor",
		"storage_migrator_trigger_discovery_errors_total",
		"storage_migrator_trigger_discovery_polls_total",
		"storage_migrator_trigger_storage_state_transitions_total",
	}
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metric names (-want +got):\n%s", diff)
	}
	doc := readDoc(t)
	for _, name := range want {
		short := name
		for _, prefix := range []string{"storage_migrator_core_migrator_", "storage_migrator_trigger_", "storage_migrator_encryption_"} {
			short = strings.TrimPrefix(short, prefix)
		}
		if !strings.Contains(doc, "  - "+short+"{") && !strings.Contains(doc, "  - "+short+" (") {
			t.Errorf("the package doc does not list %s", name)
		}
	}
	if err := m.Register(reg); err == nil {
		t.Error("registering twice succeeded, want an error")
	}
}

func TestNilMetricsRecordNothing(t *testing.T) {
	var m *Metrics
	m.RunStarted(widgets)
	m.Listed(widgets, 1, nil)
	m.ObjectMigrated(widgets, true)
	m.ObjectSkipped(widgets, migrator.SkipGone, nil)
	m.ExecutorChosen("svm")
	m.MigrationFinished(widgets, StatusSucceeded, time.Second)
	m.DiscoveryPolled(nil, 0)
	m.StorageStateTransition(widgets, TransitionCreated)
}

func expectValue(t *testing.T, what string, c prometheus.Collector, want float64) {
	t.Helper()
	if got := testutil.ToFloat64(c); got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func expectHistogram(t *testing.T, h prometheus.Histogram, wantCount uint64, wantSum float64) {
	t.Helper()
	var metric dto.Metric
	if err := h.Write(&metric); err != nil {
		t.Fatal(err)
	}
	got := metric.GetHistogram()
	if got.GetSampleCount() != wantCount || got.GetSampleSum()-wantSum > 1e-9 || wantSum-got.GetSampleSum() > 1e-9 {
		t.Errorf("histogram count %d sum %v, want %d and %v", got.GetSampleCount(), got.GetSampleSum(), wantCount, wantSum)
	}
}

// readDoc reads the package doc, which must list every metric.
func readDoc(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func ptr[T any](v T) *T { return &v }
