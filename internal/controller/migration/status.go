package migration

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/admission"
	"github.com/svm-project/svm/internal/operation"
)

// Reasons of svm's conditions.
const (
	ReasonStarted             = "Started"
	ReasonResumed             = "Resumed"
	ReasonRetrying            = "Retrying"
	ReasonCompleted           = "Completed"
	ReasonAllObjectsRewritten = "AllObjectsRewritten"
	ReasonObjectsFailed       = "ObjectsFailed"
	// ReasonStorageVersionsDisagree: API servers encode the resource in
	// different versions; the migration waits (Running) until they agree.
	ReasonStorageVersionsDisagree = "StorageVersionsDisagree"
	// ReasonStorageVersionChanged: the storage version may have changed
	// while the migration ran; it starts over.
	ReasonStorageVersionChanged = "StorageVersionChanged"
	// ReasonWaitingForInTreeMigration: an in-tree migration of the
	// resource is Running; svm waits for it to end (Running stays True).
	ReasonWaitingForInTreeMigration = "WaitingForInTreeMigration"
	// ReasonInTreeMigrationFailed: the in-tree migration that executed
	// this one failed; the message has its words.
	ReasonInTreeMigrationFailed = "InTreeMigrationFailed"
	// ReasonInTreeNameTaken: an in-tree migration of this migration's
	// name exists and is someone else's.
	ReasonInTreeNameTaken = "InTreeNameTaken"
)

// Reasons of svm's events that are no condition's.
const (
	// ReasonFailed: the migration ended with Failed=True; the note starts
	// with the condition's reason.
	ReasonFailed = "Failed"
	// ReasonDelegated: svm handed the migration to kube-controller-manager.
	ReasonDelegated = "Delegated"
	// ReasonStopped: the run stopped because the migration was deleted
	// (by a user, or by the trigger when a newer storage version
	// superseded it).
	ReasonStopped = "Stopped"
)

// setCondition returns conds with t set to status, reason and message, and
// first. The condition set last is the migration's state, and it goes at
// index 0 because scripts written for the reference migrator read
// .status.conditions[0].type as the state: set Running=False before
// Succeeded or Failed, and a finished migration reads Succeeded or Failed
// there, as the reference leaves it.
func setCondition(conds []migrationv1alpha1.MigrationCondition, t migrationv1alpha1.MigrationConditionType, status corev1.ConditionStatus, reason, message string, now metav1.Time) []migrationv1alpha1.MigrationCondition {
	out := make([]migrationv1alpha1.MigrationCondition, 0, len(conds)+1)
	out = append(out, migrationv1alpha1.MigrationCondition{Type: t, Status: status, LastUpdateTime: now, Reason: reason, Message: message})
	for _, c := range conds {
		if c.Type != t {
			out = append(out, c)
		}
	}
	return out
}

// resumeState is the engine state saved in m, or nil for a fresh start.
func resumeState(m *migrationv1alpha1.StorageVersionMigration) *operation.State {
	if m.Status.ResourceVersionCheckpoint == "" {
		return nil
	}
	s := &operation.State{
		ContinueToken: m.Spec.ContinueToken,
		Checkpoint:    m.Status.ResourceVersionCheckpoint,
		Progress:      progressFrom(m.Status.Progress),
	}
	for _, f := range m.Status.FailedObjects {
		s.FailedObjects = append(s.FailedObjects, operation.FailedObject{Namespace: f.Namespace, Name: f.Name, Reason: f.Reason})
	}
	for _, r := range m.Status.RefusedBy {
		s.Refusals = append(s.Refusals, operation.Refusal{
			Denial:      admission.Denial{Kind: admission.Kind(r.Kind), Name: r.Name, Binding: r.Binding, Message: r.Message},
			Subresource: r.Subresource, Objects: r.Objects,
		})
	}
	return s
}

// applyState writes an engine state into status.
func applyState(st *migrationv1alpha1.StorageVersionMigrationStatus, s operation.State, hash string) {
	st.ResourceVersionCheckpoint = s.Checkpoint
	if hash != "" {
		st.StorageVersionHash = hash
	}
	st.Progress = progressOf(s.Progress)
	st.Pacing = pacingOf(s.Pacing)
	st.FailedObjects = nil
	for _, f := range s.FailedObjects {
		st.FailedObjects = append(st.FailedObjects, migrationv1alpha1.FailedObject{Namespace: f.Namespace, Name: f.Name, Reason: f.Reason})
	}
	st.RefusedBy = nil
	for _, r := range s.Refusals {
		if len(st.RefusedBy) == maxRefusals {
			break
		}
		st.RefusedBy = append(st.RefusedBy, migrationv1alpha1.AdmissionRefusal{
			Kind: string(r.Kind), Name: r.Name, Binding: r.Binding, Subresource: r.Subresource, Objects: r.Objects, Message: truncate(r.Message, 1000),
		})
	}
}

// maxRefusals is the most refusers status.refusedBy names.
const maxRefusals = 32

// pacingOf is the engine's pacing state as the API shows it; nil for none.
func pacingOf(p *operation.PacerState) *migrationv1alpha1.MigrationPacing {
	if p == nil {
		return nil
	}
	decision := map[operation.PacerDecision]string{
		operation.PacerGrow: "Grow", operation.PacerKnee: "Knee", operation.PacerBackOff: "BackOff",
		operation.PacerHold: "Hold",
	}
	mp := &migrationv1alpha1.MigrationPacing{
		WritesPerSecond: int32(math.Round(p.Rate)),
		RateWindow:      int32(p.RateWindow),
		WritesInFlight:  int32(p.InFlight),
		Window:          int32(p.Window),
		SmoothedLatency: metav1.Duration{Duration: p.SmoothedLatency.Round(time.Millisecond)},
		KneeWrites:      int32(math.Round(p.Knee)),
		LastDecision:    decision[p.Decision],
	}
	if p.QPS > 0 {
		mp.QPS = resource.NewMilliQuantity(int64(math.Round(1000*p.QPS)), resource.DecimalSI)
	}
	return mp
}

// progressOf is the engine's progress as the API keeps it.
func progressOf(p operation.Progress) migrationv1alpha1.MigrationProgress {
	out := migrationv1alpha1.MigrationProgress{
		Listed: p.Listed, Restored: p.Restored, AlreadyCurrent: p.AlreadyCurrent, WrittenSinceStart: p.WrittenSinceStart,
		WrittenSinceChange: p.WrittenSinceChange, Gone: p.Gone, Failed: p.Failed, ThroughStatus: p.ThroughStatus,
		ManagedFieldsMoved: p.ManagedFieldsRewritten, RemainingEstimate: p.RemainingEstimate,
	}
	if l := p.ManagedFieldsLeft; l.Total() > 0 {
		left := migrationv1alpha1.ManagedFieldsLeft(l)
		out.ManagedFieldsLeft = &left
	}
	return out
}

// progressFrom is the engine's progress saved in a migration's status,
// without the estimate: the server is asked again on the next list.
func progressFrom(p migrationv1alpha1.MigrationProgress) operation.Progress {
	out := operation.Progress{Counts: operation.Counts{
		Listed: p.Listed, Restored: p.Restored, AlreadyCurrent: p.AlreadyCurrent, WrittenSinceStart: p.WrittenSinceStart,
		WrittenSinceChange: p.WrittenSinceChange, Gone: p.Gone, Failed: p.Failed, ThroughStatus: p.ThroughStatus,
		ManagedFieldsRewritten: p.ManagedFieldsMoved,
	}}
	if l := p.ManagedFieldsLeft; l != nil {
		out.ManagedFieldsLeft = operation.LeftCounts(*l)
	}
	return out
}

// outcome is how a finished run changes the status, and whether it should
// be retried later.
type outcome struct {
	retry bool
}

// finish records the end of a run in st. A run that ended by cancellation
// leaves the status as it was, so the migration resumes.
func finish(st *migrationv1alpha1.StorageVersionMigrationStatus, res operation.RunResult, err error, now metav1.Time) outcome {
	applyState(st, res.State, res.StorageVersionHash)
	var terminal *operation.TerminalError
	var partial *operation.ObjectsFailedError
	switch {
	case err == nil:
		st.Conditions = setCondition(st.Conditions, migrationv1alpha1.MigrationRunning, corev1.ConditionFalse, ReasonCompleted, "", now)
		msg := res.Progress.Outcomes()
		if st.InTreeMigration != "" {
			// svm counted nothing but the managedFields it moved before
			// the hand-over: kube-controller-manager wrote.
			msg = "every object rewritten by kube-controller-manager's in-tree migration " + st.InTreeMigration
			if n := res.Progress.ManagedFieldsRewritten; n > 0 {
				msg += fmt.Sprintf("; managedFields moved off the retired versions on %d objects before it was handed over", n)
			}
		}
		st.Conditions = setCondition(st.Conditions, migrationv1alpha1.MigrationSucceeded, corev1.ConditionTrue, ReasonAllObjectsRewritten, msg, now)
		st.CompletionTime = &now
	case errors.As(err, &partial):
		st.Conditions = setCondition(st.Conditions, migrationv1alpha1.MigrationRunning, corev1.ConditionFalse, ReasonCompleted, "", now)
		st.Conditions = setCondition(st.Conditions, migrationv1alpha1.MigrationFailed, corev1.ConditionTrue, ReasonObjectsFailed, failedMessage(res), now)
		st.CompletionTime = &now
	case errors.As(err, &terminal):
		st.Conditions = setCondition(st.Conditions, migrationv1alpha1.MigrationRunning, corev1.ConditionFalse, terminal.Reason, "", now)
		st.Conditions = setCondition(st.Conditions, migrationv1alpha1.MigrationFailed, corev1.ConditionTrue, terminal.Reason, terminal.Error(), now)
		st.CompletionTime = &now
	default:
		// Transient trouble outlived the engine's retries: keep Running,
		// say why, and try again after a backoff.
		st.Conditions = setCondition(st.Conditions, migrationv1alpha1.MigrationRunning, corev1.ConditionTrue, ReasonRetrying, truncate(err.Error(), 1024), now)
		return outcome{retry: true}
	}
	return outcome{}
}

func failedMessage(res operation.RunResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d objects could not be rewritten", res.Progress.Failed, res.Progress.Listed)
	for _, r := range res.Refusals {
		fmt.Fprintf(&b, "; %s", r)
	}
	for i, f := range res.FailedObjects {
		if i == 10 {
			fmt.Fprintf(&b, "; and %d more (see status.failedObjects)", res.Progress.Failed-10)
			break
		}
		name := f.Name
		if f.Namespace != "" {
			name = f.Namespace + "/" + f.Name
		}
		fmt.Fprintf(&b, "; %s: %s", name, truncate(f.Reason, 200))
	}
	return b.String()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
