package migration

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/fingerprint"
	"github.com/svm-project/svm/internal/followup"
	"github.com/svm-project/svm/internal/metrics"
	"github.com/svm-project/svm/internal/operation"
)

// execution is one run of a migration: the status it keeps saving, and the
// engine state it resumes from.
type execution struct {
	r      *Reconciler
	m      *migrationv1alpha1.StorageVersionMigration
	ex     Executor
	gvr    schema.GroupVersionResource
	status *migrationv1alpha1.StorageVersionMigrationStatus
	resume *operation.State
	// storedSince is what the guard read before the run: objects written
	// since are skipped (operation.Request.StoredSince).
	storedSince *operation.StoredSince
	log         klog.Logger
	// end is how the run ended, for the scheduler (see ending).
	end ending
	// generation is the generation of the resource's CRD the run started
	// at, read with the guard's fingerprint; 0 when unknown.
	generation int64
	// crd is the StorageMigrating condition the executor left on the
	// CRD, settled as crdEnd says once the run has ended (see CRDMark).
	crd    CRDMark
	crdEnd runEnd
	// crdRead is the resource's CRD as the guard read it before the run,
	// nil when it has none or no guard was read.
	crdRead *apiextensionsv1.CustomResourceDefinition
}

// execute runs one migration with ex to its end, cancellation, or a
// transient failure, and returns how it ended for the scheduler. The guard
// is read before the objects are rewritten and after (see Judge).
func (r *Reconciler) execute(ctx context.Context, m *migrationv1alpha1.StorageVersionMigration, ex Executor) ending {
	e := r.newExecution(ctx, m, ex)
	e.run(ctx)
	return e.end
}

// newExecution is a run of m with ex, not started.
func (r *Reconciler) newExecution(ctx context.Context, m *migrationv1alpha1.StorageVersionMigration, ex Executor) *execution {
	return &execution{
		r: r, m: m, ex: ex,
		gvr:    schema.GroupVersionResource{Group: m.Spec.Resource.Group, Version: m.Spec.Resource.Version, Resource: m.Spec.Resource.Resource},
		status: m.Status.DeepCopy(),
		resume: resumeState(m),
		log:    klog.FromContext(ctx).WithValues("migration", klog.KObj(m), "resource", m.Spec.Resource),
	}
}

// run runs the migration once; e.end then says how it ended.
func (e *execution) run(ctx context.Context) {
	if !e.begin(ctx) || !e.guard(ctx, StorageGuard.Read, e.guardBefore) {
		return
	}
	// The condition says how the run ended only once the guard decided
	// whether it holds, and the outcome is saved.
	defer func() { e.crd.Settle(ctx, e.crdEnd) }()
	res, err := e.rewrite(ctx)
	if e.interrupted(ctx, err) {
		return
	}
	if err == nil && !e.guard(ctx, StorageGuard.ReadAfter, e.guardAfter) {
		return
	}
	e.conclude(ctx, res, err)
}

// retryLater ends the run, to be run again after the scheduler's backoff.
func (e *execution) retryLater(err error) {
	e.end = ending{m: e.m, retry: err}
}

// waitLater ends this run without error: the migration stays Running with
// reason and message, and is tried again after the backoff.
func (e *execution) waitLater(ctx context.Context, reason, message string) {
	e.status.Conditions = setCondition(e.status.Conditions, migrationv1alpha1.MigrationRunning, corev1.ConditionTrue, reason, message, metav1.NewTime(e.r.Clock.Now()))
	if err := e.r.patchStatus(ctx, e.m, e.status); err != nil {
		e.retryLater(err)
		return
	}
	e.retryLater(errors.New(message))
}

// hold records that the run stopped for an in-tree migration of its
// resource: the migration stays Running, saying what it waits for, and the
// scheduler starts it again, resuming, once the in-tree one has ended.
func (e *execution) hold(ctx context.Context, holder string) {
	final, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	msg := heldMessage(e.m, holder)
	e.status.Conditions = setCondition(e.status.Conditions, migrationv1alpha1.MigrationRunning, corev1.ConditionTrue, ReasonWaitingForInTreeMigration, msg, metav1.NewTime(e.r.Clock.Now()))
	if err := e.r.patchStatus(final, e.m, e.status); err != nil {
		e.log.Info("Could not record the wait for an in-tree migration", "err", err)
	}
	e.r.event(e.m, corev1.EventTypeNormal, ReasonWaitingForInTreeMigration, msg+"; stopped at its last completed chunk")
	e.log.Info("Migration stopped for an in-tree migration of its resource", "inTreeMigration", holder)
}

// redo saves a status that starts the migration over and has it run again
// after the backoff (which also gives the servers time to settle).
func (e *execution) redo(ctx context.Context, message string) {
	final, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	e.status.Conditions = setCondition(e.status.Conditions, migrationv1alpha1.MigrationRunning, corev1.ConditionTrue, ReasonStorageVersionChanged, message, metav1.NewTime(e.r.Clock.Now()))
	if err := e.r.saveStartOver(final, e.m, e.status); err != nil {
		e.retryLater(err)
		return
	}
	e.retryLater(errors.New(message))
}

// begin marks the migration Running, started or resumed, and tells whether
// that was saved.
func (e *execution) begin(ctx context.Context) bool {
	reason := ReasonStarted
	if e.resume != nil {
		reason = ReasonResumed
	}
	now := metav1.NewTime(e.r.Clock.Now())
	if e.status.StartTime == nil {
		e.status.StartTime = &now
	}
	e.status.Conditions = setCondition(e.status.Conditions, migrationv1alpha1.MigrationRunning, corev1.ConditionTrue, reason, "", now)
	if err := e.r.patchStatus(ctx, e.m, e.status); err != nil {
		e.retryLater(err)
		return false
	}
	if e.resume != nil {
		e.r.event(e.m, corev1.EventTypeNormal, reason, fmt.Sprintf("Resuming the migration of %s after %d objects listed", resourceString(e.m), e.resume.Progress.Listed))
	} else {
		e.r.event(e.m, corev1.EventTypeNormal, reason, "Migrating "+resourceString(e.m))
	}
	e.log.Info("Migration started", "reason", reason)
	return true
}

// guard reads the resource's storage fingerprint with read (the guard's
// Read before the run, ReadAfter after it) and hands it to act,
// guardBefore or guardAfter; it tells whether the run goes on. Without a
// guard there is nothing to read and the run goes on; a failed read stops
// it, to be retried later.
func (e *execution) guard(ctx context.Context, read func(StorageGuard, context.Context, schema.GroupResource) (Reading, error), act func(context.Context, Reading) bool) bool {
	if e.r.Guard == nil {
		return true
	}
	r, err := read(e.r.Guard, ctx, e.gvr.GroupResource())
	if err != nil {
		e.retryLater(err)
		return false
	}
	return act(ctx, r)
}

// guardBefore acts on Judge's verdict on r, read before the objects are
// rewritten; it tells whether the run goes on. The executor starts from
// r's CRD.
func (e *execution) guardBefore(ctx context.Context, r Reading) bool {
	fp := r.Fingerprint
	v := Judge(GuardInput{Saved: e.status.StorageFingerprint, Now: fp})
	switch v.Action {
	case GuardWait:
		e.waitLater(ctx, ReasonStorageVersionsDisagree, v.Why+"; waiting for them to agree")
		return false
	case GuardStartOver:
		e.r.event(e.m, corev1.EventTypeWarning, ReasonStorageVersionChanged, v.Why+": starting over")
		e.log.Info("Storage version changed since the migration started; starting over", "was", e.status.StorageFingerprint, "now", fp.Value)
		if err := e.abandonInTree(ctx); err != nil {
			e.retryLater(err)
			return false
		}
		startOver(e.status, v.Fingerprint)
		if err := e.r.saveStartOver(ctx, e.m, e.status); err != nil {
			e.retryLater(err)
			return false
		}
		e.resume = nil
	default:
		e.status.StorageFingerprint = v.Fingerprint
	}
	e.generation, _ = fingerprint.CRDGeneration(fp.Value)
	// Only the trigger's migrations skip objects written since the
	// storage version change: they are made for it. A user's migration
	// may be made to re-encrypt under a new key, which objects written
	// since the change may not be under yet.
	if followup.Trigger.Owns(e.m) {
		e.storedSince = e.r.Guard.StoredSince(ctx, e.gvr.GroupResource(), r)
	}
	e.crdRead = r.CRD
	return true
}

// rewrite has the executor rewrite every object, saving the engine's state
// after each chunk.
func (e *execution) rewrite(ctx context.Context) (operation.RunResult, error) {
	return e.ex.Execute(ctx, Run{
		Migration:   e.m,
		Resource:    e.gvr,
		Resume:      e.resume,
		StoredSince: e.storedSince,
		OnDelegated: e.delegated,
		OnChunk:     e.saveChunk,
		Generation:  e.generation,
		CRD:         &e.crd,
		CRDRead:     e.crdRead,
	})
}

// abandoner is an executor that can take back what it handed over
// (InTreeExecutor.Abandon).
type abandoner interface {
	Abandon(ctx context.Context, m *migrationv1alpha1.StorageVersionMigration) error
}

// abandonInTree deletes the in-tree migration an earlier or this run of
// the migration handed over, when the run is found to prove nothing: were
// it left, the next run would follow it to its old end, and
// kube-controller-manager, restarted, might run it outside any run of
// svm's and prune storedVersions. Nothing when none was handed over.
func (e *execution) abandonInTree(ctx context.Context) error {
	a, ok := e.ex.(abandoner)
	if e.status.InTreeMigration == "" || !ok {
		return nil
	}
	final, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := a.Abandon(final, e.m); err != nil {
		return err
	}
	e.log.Info("Deleted the in-tree migration this migration handed over: it proves nothing", "inTreeMigration", e.status.InTreeMigration)
	return nil
}

// delegated records the in-tree migration that executes this one.
func (e *execution) delegated(ctx context.Context, inTree string) error {
	if e.status.InTreeMigration == inTree {
		return nil
	}
	e.status.InTreeMigration = inTree
	e.r.event(e.m, corev1.EventTypeNormal, ReasonDelegated, "kube-controller-manager executes this migration as in-tree migration "+inTree)
	return e.r.patchStatus(ctx, e.m, e.status)
}

// saveChunk saves the engine's state after a chunk. The counters (in
// status) and the token (in spec) take two writes. Counters first: a crash
// between the two then resumes from the old token and counts the chunk
// again, as it counts any chunk listed again, whereas a saved token with
// unsaved counters would lose the chunk from them for good and report
// fewer objects than exist.
//
// The last chunk (no token to go on from) of a migration with no token
// saved, a resource listed in one chunk, is not saved: the run's
// conclusion saves the same counters a moment later, and should the run
// stop in between, the next one lists it again, as after any unsaved
// chunk. A migration with a token saved clears it with its last chunk,
// before its outcome: one that says Succeeded or Failed never shows a
// token to go on from.
func (e *execution) saveChunk(ctx context.Context, s operation.State) error {
	if s.ContinueToken == "" && e.m.Spec.ContinueToken == "" {
		return nil
	}
	applyState(e.status, s, "")
	if err := e.r.patchStatus(ctx, e.m, e.status); err != nil {
		return err
	}
	return e.r.patchContinueToken(ctx, e.m, s.ContinueToken)
}

// interrupted handles a run that did not end by itself: stopped (held by
// an in-tree migration, shutting down, the migration deleted or finished
// elsewhere) or the migration deleted while saving. It tells whether the
// run was.
func (e *execution) interrupted(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		var held *heldByInTree
		if errors.As(context.Cause(ctx), &held) {
			e.hold(ctx, held.name)
			return true
		}
		// Shutting down, or the migration was deleted: keep the saved state.
		e.log.Info("Migration stopped", "reason", context.Cause(ctx))
		if !e.r.runner.shuttingDown() {
			e.r.event(e.m, corev1.EventTypeNormal, ReasonStopped, "Stopped: the migration was deleted or finished elsewhere")
		}
		return true
	}
	// Only errGone, from saving the migration, means it was deleted. A
	// NotFound from the engine is about the resource being migrated (a CRD
	// deleted meanwhile): the migration must fail with that reason, not
	// stop and be restarted at once as if deleted.
	if errors.Is(err, errGone) {
		e.log.Info("Migration deleted while running")
		e.r.event(e.m, corev1.EventTypeNormal, ReasonStopped, "Stopped: the migration was deleted")
		return true
	}
	return false
}

// guardAfter acts on Judge's verdict on r, read once every object was
// rewritten; it tells whether the migration may succeed. The CRD's
// condition is settled from r's CRD.
func (e *execution) guardAfter(ctx context.Context, r Reading) bool {
	fp := r.Fingerprint
	e.crd.read = r.CRD
	v := Judge(GuardInput{After: true, Saved: e.status.StorageFingerprint, Now: fp})
	if v.Action == GuardGoOn {
		return true
	}
	e.r.event(e.m, corev1.EventTypeWarning, ReasonStorageVersionChanged, v.Why+": starting over")
	e.log.Info("Storage version changed during the migration; starting over", "was", e.status.StorageFingerprint, "now", fp.Value, "disagreement", fp.Disagreement)
	e.crdEnd = endStartedOver
	if err := e.abandonInTree(ctx); err != nil {
		// Not started over: the next run finds the storage changed
		// since the fingerprint saved, and abandons it then.
		e.retryLater(err)
		return false
	}
	startOver(e.status, v.Fingerprint)
	e.redo(ctx, v.Why+"; starting over")
	return false
}

// conclude saves the outcome of a run the executor ended, err being its
// error: succeeded, failed, or to be retried.
func (e *execution) conclude(ctx context.Context, res operation.RunResult, err error) {
	out := finish(e.status, res, err, metav1.NewTime(e.r.Clock.Now()))
	// The final writes must outlive the run's context: once the API server
	// has stored Succeeded or Failed, the scheduler stops this run, which
	// would cancel the write while its answer is being read, and the end
	// would go unreported.
	final, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	// Counters before the token, as after every chunk. The token differs
	// from the saved one only when a chunk's save failed, which ends the
	// run to be retried.
	if perr := e.r.patchStatus(final, e.m, e.status); perr != nil {
		e.retryLater(perr)
		return
	}
	if terr := e.r.patchContinueToken(final, e.m, res.ContinueToken); terr != nil && !out.retry {
		e.retryLater(terr)
		return
	}
	switch {
	case out.retry:
		e.retryLater(err)
	case err == nil:
		e.crdEnd = endSucceeded
		e.succeeded(res)
	default:
		e.crdEnd = endFailed
		e.failed(err)
	}
}

// succeeded reports a migration that ended with Succeeded=True.
func (e *execution) succeeded(res operation.RunResult) {
	e.end = ending{m: e.m, final: true}
	e.r.Metrics.MigrationFinished(e.gvr.GroupResource(), metrics.StatusSucceeded, took(e.status))
	e.r.event(e.m, corev1.EventTypeNormal, ReasonAllObjectsRewritten, condition(e.status, migrationv1alpha1.MigrationSucceeded).Message)
	e.log.Info("Migration succeeded", append(outcomeValues(res.Progress), "inTreeMigration", e.status.InTreeMigration)...)
}

// outcomeValues are the log's key/value pairs of where the listed objects
// went: every one of them under exactly one outcome, so that they add up
// to listed as the migration's status and objects_total do.
func outcomeValues(p operation.Progress) []any {
	return []any{"listed", p.Listed, "restored", p.Restored, "alreadyCurrent", p.AlreadyCurrent,
		"writtenSinceStart", p.WrittenSinceStart, "writtenSinceChange", p.WrittenSinceChange, "gone", p.Gone, "failed", p.Failed}
}

// failed reports a migration that ended with Failed=True because of err.
func (e *execution) failed(err error) {
	e.end = ending{m: e.m, final: true}
	e.r.Metrics.MigrationFinished(e.gvr.GroupResource(), metrics.StatusFailed, took(e.status))
	failed := condition(e.status, migrationv1alpha1.MigrationFailed)
	e.r.event(e.m, corev1.EventTypeWarning, ReasonFailed, truncate(failed.Reason+": "+failed.Message, 1024))
	e.log.Info("Migration failed", append(outcomeValues(progressFrom(e.status.Progress)), "reason", failed.Reason, "err", err)...)
}
