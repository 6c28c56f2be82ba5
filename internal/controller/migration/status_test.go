package migration

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/migrator"
)

// TestSavedStateResumes checks that everything the engine needs to resume
// survives a trip through a migration's status and spec, the way the
// controller saves it after every chunk and reads it after a restart.
func TestSavedStateResumes(t *testing.T) {
	remaining := int64(40)
	saved := migrator.State{
		ContinueToken: "token",
		Checkpoint:    "1234",
		Progress: migrator.Progress{
			Listed: 100, Rewritten: 80, Skipped: 15, SkippedWithoutWrite: 12, Failed: 5, RemainingEstimate: &remaining,
		},
		FailedObjects: []migrator.FailedObject{{Namespace: "ns", Name: "w-1", Reason: "denied"}},
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
	if m.Status.StorageVersionHash != "hash" || m.Status.Progress.SkippedWithoutWrite != 12 {
		t.Errorf("status %+v: want the hash and 12 objects skipped without a write", m.Status)
	}
}
