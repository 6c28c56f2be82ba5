package migrate

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/svm-project/svm/internal/operation"
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
}

func TestOptionsSayWhatTheOperationsDo(t *testing.T) {
	var waited time.Time
	var told []Progress
	opts := Options{Workers: 3, CRDDrainMargin: time.Minute, OnDrainWait: func(until time.Time) { waited = until },
		OnProgress: func(p Progress) { told = append(told, p) }}
	got := opts.operations()
	if got.Tuning.Workers != 3 || got.CRDDrainMargin != time.Minute {
		t.Errorf("operations = %+v, want workers 3 and a drain margin of a minute", got)
	}
	now := time.Now()
	got.OnDrainWait(now)
	if !waited.Equal(now) {
		t.Errorf("OnDrainWait was not handed on")
	}
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	estimate := int64(4)
	got.OnProgress(gvr, operation.Progress{Counts: Counts{Listed: 2, Restored: 1}, RemainingEstimate: &estimate})
	want := []Progress{{Resource: gvr, Counts: Counts{Listed: 2, Restored: 1}, RemainingEstimate: &estimate}}
	if diff := cmp.Diff(want, told); diff != "" {
		t.Errorf("OnProgress told (-want +got):\n%s", diff)
	}
	if (Options{}).operations().OnProgress != nil {
		t.Error("no OnProgress asked, yet the operations report progress")
	}
}
