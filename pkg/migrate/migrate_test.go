package migrate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/svm-project/svm/internal/managedfields"
	"github.com/svm-project/svm/internal/migrator"
)

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr bool
	}{
		{"zero values are the defaults", Options{}, false},
		{"all set", Options{Workers: 4, QPS: 2.5, ChunkSize: 100, FieldManager: "my-operator"}, false},
		{"negative workers", Options{Workers: -1}, true},
		{"negative qps", Options{QPS: -1}, true},
		{"NaN qps", Options{QPS: math.NaN()}, true},
		{"infinite qps", Options{QPS: math.Inf(1)}, true},
		{"negative chunk size", Options{ChunkSize: -5}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.validate()
			if (err != nil) != tt.wantErr {
				t.Fatalf("validate = %v, want error: %v", err, tt.wantErr)
			}
			var terminal *TerminalError
			if err != nil && (!errors.As(err, &terminal) || terminal.Reason != ReasonInvalidOptions) {
				t.Errorf("validate = %#v, want a *TerminalError with reason %s", err, ReasonInvalidOptions)
			}
		})
	}
}

func TestEngineOptions(t *testing.T) {
	// Requests are evenly spaced unless a burst is asked for.
	tests := []struct {
		qps       float64
		burst     int
		wantLimit bool
		wantBurst int
	}{
		{0, 0, false, 0},
		{0.5, 0, true, 1},
		{2.5, 0, true, 1},
		{50, 0, true, 1},
		{50, 20, true, 20},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.qps, "/", tt.burst), func(t *testing.T) {
			got := Options{QPS: tt.qps, Burst: tt.burst, Workers: 3, ChunkSize: 7, FieldManager: "fm"}.tuning().Options()
			if got.Workers != 3 || got.ChunkSize != 7 || got.FieldManager != "fm" {
				t.Errorf("engine options = %+v, want workers 3, chunk size 7, field manager fm", got)
			}
			if (got.Limiter != nil) != tt.wantLimit {
				t.Fatalf("engine options (qps %v) limiter = %v, want one: %v", tt.qps, got.Limiter, tt.wantLimit)
			}
			if got.Limiter != nil && (float64(got.Limiter.Limit()) != tt.qps || got.Limiter.Burst() != tt.wantBurst) {
				t.Errorf("limiter = %v/s burst %d, want %v/s burst %d", got.Limiter.Limit(), got.Limiter.Burst(), tt.qps, tt.wantBurst)
			}
		})
	}
	if got := (Options{}).fieldManager(); got != DefaultFieldManager {
		t.Errorf("default field manager = %q, want %q", got, DefaultFieldManager)
	}
}

func TestPublicError(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "example.com", Resource: "widgets"}, "", errors.New("no"))
	tests := []struct {
		name          string
		err           error
		wantReason    string // of a *TerminalError
		wantFailed    int64  // of an *ObjectsFailedError
		wantTransient bool
		wantCause     error
	}{
		{name: "terminal", err: &migrator.TerminalError{Reason: "Forbidden", Err: forbidden}, wantReason: ReasonForbidden, wantCause: forbidden},
		{name: "objects failed", err: &migrator.ObjectsFailedError{Count: 3}, wantFailed: 3},
		{name: "transient", err: fmt.Errorf("list widgets: %w", apierrors.NewServiceUnavailable("busy")), wantTransient: true},
		{name: "cancelled", err: context.Canceled, wantCause: context.Canceled},
		{name: "deadline", err: context.DeadlineExceeded, wantCause: context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := publicError("widgets.example.com", tt.err)
			var internal *migrator.TerminalError
			var internalFailed *migrator.ObjectsFailedError
			if errors.As(err, &internal) || errors.As(err, &internalFailed) {
				t.Errorf("publicError(%v) lets the engine's error type through", tt.err)
			}
			var terminal *TerminalError
			if got := errors.As(err, &terminal); got != (tt.wantReason != "") {
				t.Errorf("publicError(%v) is a *TerminalError: %v, want %v", tt.err, got, tt.wantReason != "")
			} else if got && terminal.Reason != tt.wantReason {
				t.Errorf("reason = %q, want %q", terminal.Reason, tt.wantReason)
			}
			var failed *ObjectsFailedError
			if got := errors.As(err, &failed); got != (tt.wantFailed > 0) {
				t.Errorf("publicError(%v) is an *ObjectsFailedError: %v, want %v", tt.err, got, tt.wantFailed > 0)
			} else if got && failed.Count != tt.wantFailed {
				t.Errorf("count = %d, want %d", failed.Count, tt.wantFailed)
			}
			if IsTransient(err) != tt.wantTransient {
				t.Errorf("IsTransient(%v) = %v, want %v", err, !tt.wantTransient, tt.wantTransient)
			}
			if tt.wantCause != nil && !errors.Is(err, tt.wantCause) {
				t.Errorf("publicError(%v) = %v, which does not wrap %v", tt.err, err, tt.wantCause)
			}
		})
	}
	if publicError("widgets", nil) != nil {
		t.Error("publicError(nil) is not nil")
	}
}

func TestIsTransient(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"terminal", &TerminalError{Reason: ReasonForbidden, Err: errors.New("no")}, false},
		{"wrapped terminal", fmt.Errorf("x: %w", &TerminalError{Reason: ReasonForbidden, Err: errors.New("no")}), false},
		{"objects failed", fmt.Errorf("x: %w", &ObjectsFailedError{Count: 1}), false},
		{"cancelled", fmt.Errorf("x: %w", context.Canceled), false},
		{"deadline", context.DeadlineExceeded, false},
		{"the CRD changed", fmt.Errorf("crd x: %w: why", ErrCRDChanged), true},
		{"an outage", apierrors.NewServiceUnavailable("busy"), true},
	}
	for _, tt := range tests {
		if got := IsTransient(tt.err); got != tt.want {
			t.Errorf("IsTransient(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestCountsOf(t *testing.T) {
	p := migrator.Progress{Listed: 21, Restored: 10, AlreadyCurrent: 5, WrittenSinceStart: 3, Gone: 2, Failed: 1, SkippedWithoutWrite: 4}
	want := Counts{Listed: 21, Restored: 10, AlreadyCurrent: 5, WrittenSinceStart: 3, Gone: 2, Failed: 1}
	if diff := cmp.Diff(want, countsOf(p)); diff != "" {
		t.Errorf("countsOf (-want +got):\n%s", diff)
	}
	if got := want.Migrated(); got != 15 {
		t.Errorf("Migrated = %d, want 15", got)
	}
	if got := want.Handled(); got != 21 {
		t.Errorf("Handled = %d, want 21", got)
	}
	if got, want := want.Outcomes(), "listed 21: migrated 15 (re-stored 10, already current 5), written since the start 3, gone 2, failed 1"; got != want {
		t.Errorf("Outcomes = %q, want %q", got, want)
	}
	// Entries left are counted by reason, and said so.
	p.ManagedFieldsRewritten = 4
	p.ManagedFieldsLeft = map[managedfields.Reason]int64{managedfields.Refused: 1, managedfields.NotConverted: 2}
	got := countsOf(p)
	if diff := cmp.Diff(LeftCounts{Refused: 1, NotConverted: 2}, got.ManagedFieldsLeft); diff != "" {
		t.Errorf("ManagedFieldsLeft (-want +got):\n%s", diff)
	}
	if !strings.HasSuffix(got.Outcomes(), "; managedFields moved on 4 objects, entries left naming a version given up 3 (NotConverted 2, Refused 1)") {
		t.Errorf("Outcomes = %q, does not say what was left", got.Outcomes())
	}
}
