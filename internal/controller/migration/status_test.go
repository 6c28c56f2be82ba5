package migration

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/operation"
)

// TestSavedStateResumes checks that everything the engine needs to resume
// survives a trip through a migration's status and spec, the way the
// controller saves it after every chunk and reads it after a restart.
func TestSavedStateResumes(t *testing.T) {
	remaining := int64(40)
	saved := operation.State{
		ContinueToken: "token",
		Checkpoint:    "1234",
		Progress: operation.Progress{
			Counts: operation.Counts{Listed: 100, Restored: 70, AlreadyCurrent: 10, WrittenSinceStart: 13, Gone: 2, Failed: 5,
				ThroughStatus: 4, ManagedFieldsRewritten: 60, ManagedFieldsLeft: operation.LeftCounts{NotConverted: 1, Denied: 4}},
			RemainingEstimate: &remaining,
		},
		FailedObjects: []operation.FailedObject{{Namespace: "ns", Name: "w-1", Reason: "denied"}},
	}
	var m migrationv1alpha1.StorageVersionMigration
	applyState(&m.Status, saved, "hash")
	m.Spec.ContinueToken = saved.ContinueToken

	got := resumeState(&m)
	// The estimate is the server's, asked again on the next list.
	want := saved
	want.Progress.RemainingEstimate = nil
	if diff := cmp.Diff(&want, got); diff != "" {
		t.Errorf("resumed state (-saved +resumed):\n%s", diff)
	}
	if p := m.Status.Progress; m.Status.StorageVersionHash != "hash" || p.Skipped() != 15 || p.RemainingEstimate == nil || *p.RemainingEstimate != remaining {
		t.Errorf("status %+v: want the hash, 15 objects skipped and the estimate", m.Status)
	}
	// The API says the entries left in the engine's words.
	if got, want := m.Status.Progress.ManagedFieldsLeft.String(), saved.Progress.ManagedFieldsLeft.String(); got != want {
		t.Errorf("status.progress.managedFieldsLeft says %q, the engine %q", got, want)
	}
}

// TestFinishedStateIsConditionZero reads a finished migration the way
// scripts written for the reference migrator do: .status.conditions[0]
// is the state, Succeeded or Failed, never the Running=False beside it.
func TestFinishedStateIsConditionZero(t *testing.T) {
	now := metav1.Now()
	tests := []struct {
		name     string
		err      error
		inTree   string
		want     migrationv1alpha1.MigrationConditionType
		wantText string
	}{
		{name: "succeeded", want: migrationv1alpha1.MigrationSucceeded, wantText: "migrated 3 (re-stored 2, already current 1), written since the start 1, gone 0, failed 0"},
		{name: "succeeded in-tree", inTree: "widgets-x", want: migrationv1alpha1.MigrationSucceeded, wantText: "every object rewritten by kube-controller-manager's in-tree migration widgets-x"},
		{name: "objects failed", err: &operation.ObjectsFailedError{Count: 1}, want: migrationv1alpha1.MigrationFailed},
		{name: "terminal", err: &operation.TerminalError{Reason: "Forbidden", Err: errors.New("no")}, want: migrationv1alpha1.MigrationFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &migrationv1alpha1.StorageVersionMigrationStatus{InTreeMigration: tt.inTree}
			st.Conditions = setCondition(st.Conditions, migrationv1alpha1.MigrationRunning, "True", ReasonStarted, "", now)
			res := operation.RunResult{State: operation.State{Progress: operation.Progress{Counts: operation.Counts{Listed: 4, Restored: 2, AlreadyCurrent: 1, WrittenSinceStart: 1}}}}
			finish(st, res, tt.err, now)
			if len(st.Conditions) != 2 || st.Conditions[0].Type != tt.want || st.Conditions[0].Status != "True" ||
				st.Conditions[1].Type != migrationv1alpha1.MigrationRunning || st.Conditions[1].Status != "False" {
				t.Fatalf("conditions %+v: want %s=True first, then Running=False", st.Conditions, tt.want)
			}
			if tt.wantText != "" && st.Conditions[0].Message != tt.wantText {
				t.Errorf("message %q, want %q", st.Conditions[0].Message, tt.wantText)
			}
		})
	}
}

// TestRetryKeepsRunningFirst: a run that will be retried stays Running,
// and says so at index 0.
func TestRetryKeepsRunningFirst(t *testing.T) {
	now := metav1.Now()
	st := &migrationv1alpha1.StorageVersionMigrationStatus{}
	st.Conditions = setCondition(st.Conditions, migrationv1alpha1.MigrationRunning, "True", ReasonStarted, "", now)
	if out := finish(st, operation.RunResult{}, errors.New("connection refused"), now); !out.retry {
		t.Fatal("a transient error must be retried")
	}
	if len(st.Conditions) != 1 || st.Conditions[0].Type != migrationv1alpha1.MigrationRunning || st.Conditions[0].Reason != ReasonRetrying {
		t.Errorf("conditions %+v: want Running=True (Retrying) alone", st.Conditions)
	}
}

// TestPacingAsShown: status.pacing carries the pacer's state in the API's
// words and units, and is absent when the engine ran without pacing.
func TestPacingAsShown(t *testing.T) {
	var st migrationv1alpha1.StorageVersionMigrationStatus
	applyState(&st, operation.State{Pacing: &operation.PacerState{
		Window: 12, InFlight: 13, SmoothedLatency: 21*time.Millisecond + 600*time.Microsecond, Knee: 8.6, Decision: operation.PacerBackOff,
	}}, "")
	want := &migrationv1alpha1.MigrationPacing{
		WritesInFlight: 13, Window: 12, SmoothedLatency: metav1.Duration{Duration: 22 * time.Millisecond}, KneeWrites: 9, LastDecision: "BackOff",
	}
	if diff := cmp.Diff(want, st.Pacing); diff != "" {
		t.Errorf("status.pacing (-want +got):\n%s", diff)
	}
	// Under a qps cap: the rate measured, the cap, and the writes in
	// flight it allows.
	applyState(&st, operation.State{Pacing: &operation.PacerState{
		Window: 8, InFlight: 1, SmoothedLatency: 9 * time.Millisecond, Decision: operation.PacerHold,
		Rate: 96.6, QPS: 97.5, RateWindow: 2,
	}}, "")
	want = &migrationv1alpha1.MigrationPacing{
		WritesPerSecond: 97, QPS: ptr.To(resource.MustParse("97.5")), RateWindow: 2,
		WritesInFlight: 1, Window: 8, SmoothedLatency: metav1.Duration{Duration: 9 * time.Millisecond}, LastDecision: "Hold",
	}
	if diff := cmp.Diff(want, st.Pacing); diff != "" {
		t.Errorf("status.pacing under a cap (-want +got):\n%s", diff)
	}
	applyState(&st, operation.State{}, "")
	if st.Pacing != nil {
		t.Errorf("status.pacing %+v after a run without pacing, want none", st.Pacing)
	}
}
