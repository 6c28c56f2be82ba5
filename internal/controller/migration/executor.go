package migration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsapply "k8s.io/apiextensions-apiserver/pkg/client/applyconfiguration/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/intree"
	"github.com/svm-project/svm/internal/operation"
)

// Executor rewrites every object of one resource for a migration. svm has
// two: its own engine (EngineExecutor) and kube-controller-manager's
// in-tree migrator (InTreeExecutor). The controller around them does the
// rest the same way for both: scheduling, the storage guard before and
// after, conditions, events and metrics, so that a StorageState moves the
// same whoever rewrote the objects.
type Executor interface {
	// Execute runs one migration to its end and returns what the engine
	// would: a *operation.TerminalError or *operation.ObjectsFailedError
	// for a final failure, the context's error when stopped, any other
	// error for transient trouble (the migration is run again later).
	Execute(ctx context.Context, run Run) (operation.RunResult, error)
}

// Run is one execution of a migration.
type Run struct {
	// Migration is the migration to execute (a copy the run may keep).
	Migration *migrationv1alpha1.StorageVersionMigration
	// Resource is what to rewrite.
	Resource schema.GroupVersionResource
	// Resume is the engine state saved by an earlier run, nil for a fresh
	// start.
	Resume *operation.State
	// StoredSince, if set, lets the engine skip the objects written since
	// every API server stored the resource in its current version.
	StoredSince *operation.StoredSince
	// OnChunk saves the engine's state after every chunk.
	OnChunk func(context.Context, operation.State) error
	// OnDelegated records the in-tree migration that executes this one.
	OnDelegated func(ctx context.Context, inTree string) error
	// Generation is the generation of the resource's CRD the run started
	// at, the one its storage fingerprint was read at; 0 when unknown
	// (no guard, no CRD), and then the one read when the CRD is marked.
	Generation int64
	// CRD, if set, is where an executor records the StorageMigrating
	// condition it leaves on the resource's CRD, for the controller to
	// settle once the storage guard has decided whether the run holds
	// (CRDMark). Without it the executor settles the condition itself
	// when it returns.
	CRD *CRDMark
	// CRDRead is the resource's CRD as the storage guard read it just
	// before the run; nil reads it anew.
	CRDRead *apiextensionsv1.CustomResourceDefinition
}

// EngineExecutor rewrites with svm's own engine.
type EngineExecutor struct {
	Operations *operation.Operations
	// CRDs, if set, marks a custom resource's CRD with the condition
	// StorageMigrating while svm rewrites its objects, as
	// kube-controller-manager does while it migrates one, and moves the
	// objects' managedFields entries that name a version the CRD's
	// status.storedVersions will be pruned of (see RetiredFields).
	CRDs *CRDMarker
}

// Execute implements Executor.
func (e EngineExecutor) Execute(ctx context.Context, run Run) (res operation.RunResult, err error) {
	req := operation.Request{
		Resource: run.Resource, Resume: run.Resume, OnChunk: run.OnChunk, StoredSince: run.StoredSince,
		ThroughStatus: run.Migration.Spec.ThroughStatus,
	}
	if e.CRDs != nil {
		if req.ManagedFields, err = e.CRDs.RetiredFields(ctx, run.Resource, e.Operations, run.CRDRead); err != nil {
			return res, err
		}
		mark := run.CRD
		if mark == nil {
			// Nobody settles it after a guard: settled here, by how the
			// run ended.
			mark = &CRDMark{}
			defer func() { mark.Settle(ctx, endOf(err)) }()
		}
		if merr := e.CRDs.Mark(ctx, mark, run.Resource.GroupResource(), run.Migration.Name, run.Generation, run.CRDRead); merr != nil {
			return res, merr
		}
	}
	return e.Operations.Run(ctx, req)
}

// RetiredFields is what a migration of gvr must do to managedFields: move
// the entries that name a version the CRD's status.storedVersions lists
// besides the storage version, the versions the trigger prunes once the
// migration succeeds, to the version objects are written through
// (Operations.FieldsToMove, the choice svm retire and pkg/migrate make
// too). Left naming a version that is then removed from the CRD, they
// would make every server-side apply on their objects fail. nil when gvr
// has no CRD or nothing is to be pruned. crd is gvr's CRD as just read,
// nil to read it.
func (c *CRDMarker) RetiredFields(ctx context.Context, gvr schema.GroupVersionResource, ops *operation.Operations, crd *apiextensionsv1.CustomResourceDefinition) (*operation.ManagedFields, error) {
	if crd == nil {
		var err error
		if crd, err = c.read(ctx, gvr.GroupResource()); err != nil || crd == nil {
			return nil, err
		}
	}
	return ops.FieldsToMove(ctx, crd, "")
}

// read reads gr's CRD, nil when it has none.
func (c *CRDMarker) read(ctx context.Context, gr schema.GroupResource) (*apiextensionsv1.CustomResourceDefinition, error) {
	if gr.Group == "" {
		return nil, nil
	}
	name := gr.Resource + "." + gr.Group
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := c.Reader.List(ctx, &crds, client.MatchingFields{"metadata.name": name}); err != nil {
		return nil, fmt.Errorf("read the CRD %s: %w", name, err)
	}
	if len(crds.Items) == 0 {
		return nil, nil
	}
	return &crds.Items[0], nil
}

// CRDMarker sets and clears the StorageMigrating condition of a custom
// resource's CRD: the condition kube-controller-manager's in-tree migrator
// keeps while it migrates the resource, so that whoever reads the CRD sees
// a migration under way whichever migrator runs it.
type CRDMarker struct {
	// Reader reads CRDs from the API server, by listing one name (the
	// controller may list CRDs, not get them).
	Reader client.Reader
	// CRDs writes the condition with server-side apply, as
	// kube-controller-manager does, carrying the resourceVersion read.
	CRDs apiextensionsclient.CustomResourceDefinitionInterface

	saidNoGeneration sync.Once
}

// Condition reasons svm writes on StorageMigrating. Succeeded and failed
// are kube-controller-manager's own.
const (
	crdReasonRunning     = "MigrationRunning"
	crdReasonSucceeded   = "MigrationSucceeded"
	crdReasonFailed      = "MigrationFailed"
	crdReasonStopped     = "MigrationStopped"
	crdReasonStartedOver = "MigrationStartedOver"
)

// runEnd is how a run ended, as the StorageMigrating condition tells it.
type runEnd int

const (
	// endStopped: stopped or to be retried; it resumes later. What a
	// run ends as unless it is known to have ended otherwise.
	endStopped runEnd = iota
	// endSucceeded: every object rewritten, and the storage guard found
	// the storage version as it was at the start.
	endSucceeded
	// endFailed: the migration failed for good.
	endFailed
	// endStartedOver: every object rewritten, but the storage version
	// may have changed meanwhile: the run proves nothing and the
	// migration starts over.
	endStartedOver
)

// endOf is how a run that returned err ended when no guard is read after
// it.
func endOf(err error) runEnd {
	var terminal *operation.TerminalError
	var partial *operation.ObjectsFailedError
	switch {
	case err == nil:
		return endSucceeded
	case errors.As(err, &terminal) || errors.As(err, &partial):
		return endFailed
	}
	return endStopped
}

// crdCondition is the reason and message of StorageMigrating=False after
// migration's run ended as end. Only a run the guard held says
// MigrationSucceeded: a reader of the CRD (kube-controller-manager prunes
// storedVersions on it) must never see a success the guard then voided.
func crdCondition(end runEnd, migration string) (reason, message string) {
	switch end {
	case endSucceeded:
		return crdReasonSucceeded, "svm migration " + migration + " succeeded"
	case endFailed:
		return crdReasonFailed, "svm migration " + migration + " failed"
	case endStartedOver:
		return crdReasonStartedOver, "svm migration " + migration + " starts over: the storage version may have changed while it ran"
	}
	return crdReasonStopped, "svm migration " + migration + " stopped; it resumes later"
}

// CRDMark is the StorageMigrating condition a run leaves on its resource's
// CRD until the controller settles it (Settle), once the storage guard has
// decided whether the run holds: a run that rewrote every object is not
// yet a success. The zero value marks nothing.
type CRDMark struct {
	marker    *CRDMarker
	gr        schema.GroupResource
	migration string
	// generation is the CRD's generation the run started at: what the
	// condition speaks for, True and False alike, however the CRD moved
	// since.
	generation int64
	// inTree: kube-controller-manager set the condition and cleared it,
	// saying MigrationSucceeded when its migration succeeded; svm writes
	// it only to take back a success the guard voided.
	inTree bool
	// read is the CRD as last read, whose resourceVersion the next write
	// of the condition is conditional on; nil reads it first.
	read *apiextensionsv1.CustomResourceDefinition
}

// Mark sets StorageMigrating=True on gr's CRD, with generation as its
// observedGeneration (0: the CRD's as read now), and records it in mark
// for Settle; a resource without a CRD is not a custom resource and is
// left alone. crd is gr's CRD as just read, nil to read it.
func (c *CRDMarker) Mark(ctx context.Context, mark *CRDMark, gr schema.GroupResource, migration string, generation int64, crd *apiextensionsv1.CustomResourceDefinition) error {
	*mark = CRDMark{marker: c, gr: gr, migration: migration, generation: generation}
	return c.apply(ctx, gr, apiextensionsv1.ConditionTrue, crdReasonRunning, "svm migration "+migration+" is running", &mark.generation, crd)
}

// handedOver records in mark that kube-controller-manager executes the
// run: it keeps the condition of gr's CRD itself, and svm writes it only
// if the guard voids the run (Settle).
func (c *CRDMarker) handedOver(mark *CRDMark, gr schema.GroupResource, migration string, generation int64) {
	*mark = CRDMark{marker: c, gr: gr, migration: migration, generation: generation, inTree: true}
}

// Settle sets StorageMigrating=False after a run that ended as end, with
// the generation the run started at. It runs even when the run was
// cancelled, within its own deadline, so that a stopped run never leaves
// the CRD marked; failing to is logged, not returned: the run's outcome
// stands. Nothing when nothing was marked, and, where
// kube-controller-manager executed the run, unless the guard voided it.
func (m *CRDMark) Settle(ctx context.Context, end runEnd) {
	if m == nil || m.marker == nil || m.inTree && end != endStartedOver {
		return
	}
	reason, message := crdCondition(end, m.migration)
	final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := m.marker.apply(final, m.gr, apiextensionsv1.ConditionFalse, reason, message, &m.generation, m.read); err != nil {
		klog.FromContext(ctx).Error(err, "Could not clear the CRD's StorageMigrating condition", "resource", m.gr)
	}
}

// apply writes the condition, with *generation as its observedGeneration;
// a zero *generation is set to the CRD's as first read. read is the CRD as
// last read (nil to read it), which the first write is conditional on.
func (c *CRDMarker) apply(ctx context.Context, gr schema.GroupResource, status apiextensionsv1.ConditionStatus, reason, message string, generation *int64, read *apiextensionsv1.CustomResourceDefinition) error {
	if gr.Group == "" {
		return nil
	}
	name := gr.Resource + "." + gr.Group
	err := c.applyCondition(ctx, gr, status, reason, message, generation, read, true)
	if unknownObservedGeneration(err) {
		// Kubernetes before 1.35 has no observedGeneration in a CRD's
		// conditions (nor an in-tree migrator to read it): the condition
		// is set without it.
		c.saidNoGeneration.Do(func() {
			klog.FromContext(ctx).Info("The API server's CRD conditions have no observedGeneration (Kubernetes before 1.35): StorageMigrating is set without it")
		})
		err = c.applyCondition(ctx, gr, status, reason, message, generation, read, false)
	}
	switch {
	case err == nil:
		return nil
	case apierrors.IsBadRequest(err) || apierrors.IsInvalid(err) || apierrors.IsForbidden(err):
		// The condition is for those who read the CRD: a server that
		// refuses it must not keep the migration from running. Said,
		// not retried.
		klog.FromContext(ctx).Info("The API server refused the CRD's StorageMigrating condition; the migration goes on without it", "crd", name, "status", status, "err", err)
		return nil
	default:
		return fmt.Errorf("set StorageMigrating=%s on the CRD %s: %w", status, name, err)
	}
}

// applyCondition writes the condition with server-side apply, conditional
// on the CRD's resourceVersion, with *generation as its observedGeneration
// when withGeneration is set (a zero one taken from the CRD as read). The
// first attempt is conditional on read when it is set; a conflict reads
// the CRD anew.
func (c *CRDMarker) applyCondition(ctx context.Context, gr schema.GroupResource, status apiextensionsv1.ConditionStatus, reason, message string, generation *int64, read *apiextensionsv1.CustomResourceDefinition, withGeneration bool) error {
	name := gr.Resource + "." + gr.Group
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd := read
		read = nil
		if crd == nil {
			var err error
			if crd, err = c.read(ctx, gr); err != nil {
				return err
			}
		}
		if crd == nil {
			return nil // not a custom resource, or deleted: nothing to mark
		}
		if *generation == 0 {
			*generation = crd.Generation
		}
		// The generation recorded is the one the run started at, never
		// one read at this write: the run speaks for no later spec, and
		// the in-tree migrator prunes storedVersions only while the
		// condition's generation is the CRD's. The resourceVersion makes
		// the write conditional on the CRD as read.
		cond := apiextensionsapply.CustomResourceDefinitionCondition().
			WithType(apiextensionsv1.StorageMigrating).
			WithStatus(status).
			WithLastTransitionTime(metav1.Now()).
			WithReason(reason).
			WithMessage(message)
		if withGeneration {
			cond.WithObservedGeneration(*generation)
		}
		cfg := apiextensionsapply.CustomResourceDefinition(name).
			WithResourceVersion(crd.ResourceVersion).
			WithStatus(apiextensionsapply.CustomResourceDefinitionStatus().WithConditions(cond))
		_, err := c.CRDs.ApplyStatus(ctx, cfg, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
}

// KeepStoredVersions makes svm a co-owner of the status.storedVersions of
// gr's CRD, as they are, before kube-controller-manager migrates gr.
//
// kube-controller-manager (1.37) writes a CRD's status with server-side
// apply: once its migration succeeds it applies storedVersions, the
// storage version alone, and so owns them; when it starts its next
// migration of the resource it applies the StorageMigrating condition
// alone, and the API server removes what it no longer applies: the
// storedVersions are cut to the storage version before a single object is
// rewritten. Were that migration to fail, or kube-controller-manager to
// stop, they would say nothing is stored in a version that still is. A
// second owner keeps them: they are removed only when no manager applies
// them, and kube-controller-manager's own prune at the end of its
// migration (forced) still takes them over. Nothing when gr has no CRD.
func (c *CRDMarker) KeepStoredVersions(ctx context.Context, gr schema.GroupResource) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd, err := c.read(ctx, gr)
		if err != nil || crd == nil {
			return err
		}
		// The resourceVersion makes it conditional: what is applied is
		// exactly what the CRD says now.
		cfg := apiextensionsapply.CustomResourceDefinition(crd.Name).
			WithResourceVersion(crd.ResourceVersion).
			WithStatus(apiextensionsapply.CustomResourceDefinitionStatus().WithStoredVersions(crd.Status.StoredVersions...))
		_, err = c.CRDs.ApplyStatus(ctx, cfg, metav1.ApplyOptions{FieldManager: FieldManager})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("keep the storedVersions of the CRD of %s before handing it over: %w", gr, err)
	}
	return nil
}

// unknownObservedGeneration tells the API server's refusal of a CRD
// condition's observedGeneration, a field its schema lacks.
func unknownObservedGeneration(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "observedGeneration") && strings.Contains(msg, "not declared in schema")
}

// InTreeExecutor hands the rewriting to kube-controller-manager: it
// creates a storagemigration.k8s.io/v1 StorageVersionMigration named like
// svm's, owned by it, and follows it to its end, its clean-up included
// (kube-controller-manager prunes a CRD's storedVersions there), so that
// svm's trigger, which acts on the svm migration's outcome, never prunes
// as well.
type InTreeExecutor struct {
	// Client creates and deletes in-tree migrations; Reader reads them (a
	// cache is fine: the executor waits for a change).
	Client client.Client
	Reader client.Reader
	// Lookup finds the resource in discovery, with its storage version
	// hash, and refuses what cannot be migrated, as the engine does.
	Lookup func(context.Context, schema.GroupVersionResource) (*metav1.APIResource, error)
	// Fallback executes the resources kube-controller-manager cannot
	// (intree.CanExecute): svm's engine.
	Fallback Executor
	// Operations and CRDs, if set, move the managedFields entries that
	// name a version kube-controller-manager prunes from a CRD's
	// storedVersions once its migration succeeds, which it does not do
	// itself (see CRDMarker.RetiredFields), before the migration is
	// handed over: only the objects with such entries are written, by
	// svm's engine. Entries that cannot be moved keep it from being
	// handed over (see moveFirst).
	Operations *operation.Operations
	CRDs       *CRDMarker
	// Empty, if set, tells whether a resource has no object at all. An
	// empty resource is not handed over but run by Fallback, for which it
	// is one list: kube-controller-manager takes about a minute for any
	// resource, waiting for its garbage collector's cache.
	Empty func(context.Context, schema.GroupVersionResource) (bool, error)
	Clock clock.Clock
	// Interval between reads of the in-tree migration. Default 1 second.
	Interval time.Duration
}

// Execute implements Executor.
func (e InTreeExecutor) Execute(ctx context.Context, run Run) (operation.RunResult, error) {
	var res operation.RunResult
	if run.Migration.Spec.ThroughStatus {
		// kube-controller-manager fails what admission refuses; only
		// svm's engine writes through the status subresource.
		return e.Fallback.Execute(ctx, run)
	}
	info, err := e.Lookup(ctx, run.Resource)
	if err != nil {
		return res, err
	}
	if !intree.CanExecute(run.Resource.GroupResource(), info.Verbs) {
		// Handed over, it would stay Running for ever and hold the
		// resource: kube-controller-manager's migrator reads objects from
		// its garbage collector, which does not watch this resource.
		return e.Fallback.Execute(ctx, run)
	}
	res.StorageVersionHash = info.StorageVersionHash
	it, moved, err := e.handOver(ctx, run)
	if err != nil || it == nil {
		if errors.Is(err, errNotHandedOver) {
			return e.Fallback.Execute(ctx, run)
		}
		return res, err
	}
	// svm counted nothing but the managedFields it moved first:
	// kube-controller-manager rewrites.
	res.Progress.ManagedFieldsRewritten = moved
	if err := run.OnDelegated(ctx, run.Migration.Name); err != nil {
		return res, err
	}
	if e.CRDs != nil && run.CRD != nil {
		e.CRDs.handedOver(run.CRD, run.Resource.GroupResource(), run.Migration.Name, run.Generation)
	}
	return res, e.follow(ctx, run, it)
}

// errNotHandedOver: the migration is not handed over but run by Fallback.
var errNotHandedOver = errors.New("not handed over")

// handOver returns the in-tree migration that executes run, created if
// there was none, and how many objects' managedFields were moved before it
// was; errNotHandedOver when Fallback runs the migration instead (the
// resource has no object, or entries could not be moved).
func (e InTreeExecutor) handOver(ctx context.Context, run Run) (*storagemigrationv1.StorageVersionMigration, int64, error) {
	m := run.Migration
	it := &storagemigrationv1.StorageVersionMigration{}
	err := e.Reader.Get(ctx, client.ObjectKey{Name: m.Name}, it)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, 0, fmt.Errorf("read the in-tree migration %s: %w", m.Name, err)
	case it.Annotations[intree.ForMigrationAnnotation] == string(m.UID) && it.DeletionTimestamp == nil:
		return it, 0, nil
	case it.DeletionTimestamp != nil || it.Labels[intree.CreatedByLabel] == intree.CreatedByExecutor:
		// Being deleted, or one svm created for a migration of this name
		// that is gone, which svm deletes (Reconciler.deleteAbandoned).
		return nil, 0, fmt.Errorf("the in-tree migration %s of an earlier run is being deleted; waiting for it to go", m.Name)
	default:
		return nil, 0, &operation.TerminalError{Reason: ReasonInTreeNameTaken, Err: fmt.Errorf(
			"an in-tree migration named %s exists and is not this migration's: rename one of them", m.Name)}
	}
	if e.Empty != nil {
		// An object created from now on is written in the storage
		// version: an empty resource has nothing to rewrite.
		empty, eerr := e.Empty(ctx, run.Resource)
		if eerr != nil {
			return nil, 0, fmt.Errorf("tell whether %s has objects: %w", run.Resource.GroupResource(), eerr)
		}
		if empty {
			return nil, 0, errNotHandedOver
		}
	}
	moved, err := e.moveFirst(ctx, run)
	if err != nil {
		return nil, 0, err
	}
	it, err = e.create(ctx, run)
	return it, moved, err
}

// create keeps the CRD's storedVersions (KeepStoredVersions) and creates
// the in-tree migration that executes run.
func (e InTreeExecutor) create(ctx context.Context, run Run) (*storagemigrationv1.StorageVersionMigration, error) {
	if e.CRDs != nil {
		if err := e.CRDs.KeepStoredVersions(ctx, run.Resource.GroupResource()); err != nil {
			return nil, err
		}
	}
	it := newInTreeMigration(run.Migration, run.Resource.GroupResource())
	if err := e.Client.Create(ctx, it, client.FieldOwner(FieldManager)); err != nil {
		return nil, fmt.Errorf("create the in-tree migration %s: %w", run.Migration.Name, err)
	}
	return it, nil
}

// moveFirst moves the managedFields entries that name a version the CRD's
// storedVersions list besides the storage version, and returns on how many
// objects. kube-controller-manager prunes storedVersions as soon as its
// migration succeeds, whatever entries still name a pruned version, after
// which every server-side apply on their objects fails once the version
// is removed from the CRD: so they move before it is handed over, and it
// is handed over only when none is left. Entries left (or objects whose
// entries could not be written) are errNotHandedOver: svm's engine then
// rewrites the objects, counts the entries left in the migration's status,
// and the trigger holds the prune until they move (StorageState
// status.pruneHeld). Nothing when the resource has no CRD or nothing is to
// be pruned.
func (e InTreeExecutor) moveFirst(ctx context.Context, run Run) (int64, error) {
	if e.Operations == nil || e.CRDs == nil {
		return 0, nil
	}
	fields, err := e.CRDs.RetiredFields(ctx, run.Resource, e.Operations, run.CRDRead)
	if err != nil || fields == nil {
		return 0, err
	}
	fields.Only = true
	res, err := e.Operations.Run(ctx, operation.Request{Resource: run.Resource, ManagedFields: fields})
	p := res.Progress
	klog.FromContext(ctx).Info("Moved managedFields off the versions kube-controller-manager will prune, before handing over", "resource", run.Resource.GroupResource(),
		"retired", fields.Retired, "objects", p.ManagedFieldsRewritten, "entriesLeft", p.ManagedFieldsLeft.Total(), "failed", p.Failed)
	switch v := handOverAfterMove(p, err); v {
	case moveHandOver:
		return p.ManagedFieldsRewritten, nil
	case moveFallBack:
		klog.FromContext(ctx).Info("Not handing the migration over: managedFields entries still name a version kube-controller-manager would prune; svm's engine runs it, and the prune waits for them",
			"resource", run.Resource.GroupResource(), "entriesLeft", p.ManagedFieldsLeft.Total(), "failed", p.Failed)
		return 0, errNotHandedOver
	}
	return 0, err
}

// moveVerdict is what follows a move of managedFields before a hand-over.
type moveVerdict int

const (
	// moveHandOver: every entry moved; kube-controller-manager may prune.
	moveHandOver moveVerdict = iota
	// moveFallBack: entries are left, or objects could not be written:
	// not handed over, so that nobody prunes under them.
	moveFallBack
	// moveRetry: the move itself stopped (cancelled, transient or
	// terminal trouble); its error ends the run.
	moveRetry
)

// handOverAfterMove decides from a move's progress p and error err whether
// the migration may be handed over.
func handOverAfterMove(p operation.Progress, err error) moveVerdict {
	var partial *operation.ObjectsFailedError
	switch {
	case err == nil && p.ManagedFieldsLeft.Total() == 0 && p.Failed == 0:
		return moveHandOver
	case err == nil || errors.As(err, &partial):
		return moveFallBack
	}
	return moveRetry
}

// Abandon deletes the in-tree migration that executed m, if there is one,
// and waits until the Reader no longer shows it: a run that proved
// nothing (the storage guard voided it, or the storage moved since it was
// handed over) must not be followed to its old end by the next run, nor
// run later by kube-controller-manager outside any run of svm's.
func (e InTreeExecutor) Abandon(ctx context.Context, m *migrationv1alpha1.StorageVersionMigration) error {
	it := &storagemigrationv1.StorageVersionMigration{}
	err := e.Reader.Get(ctx, client.ObjectKey{Name: m.Name}, it)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("read the in-tree migration %s: %w", m.Name, err)
	case it.Annotations[intree.ForMigrationAnnotation] != string(m.UID):
		return nil
	}
	if err := intree.Delete(ctx, e.Client, it); err != nil {
		return err
	}
	uid := it.UID
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := e.Reader.Get(ctx, client.ObjectKey{Name: m.Name}, it)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return err == nil && it.UID != uid, err
	})
}

// newInTreeMigration is the in-tree migration of gr that executes m, named
// like it and owned by it.
func newInTreeMigration(m *migrationv1alpha1.StorageVersionMigration, gr schema.GroupResource) *storagemigrationv1.StorageVersionMigration {
	return &storagemigrationv1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{
			Name:        m.Name,
			Labels:      map[string]string{intree.CreatedByLabel: intree.CreatedByExecutor},
			Annotations: map[string]string{intree.ForMigrationAnnotation: string(m.UID)},
			// Deleting svm's migration (the trigger superseding it, a
			// user) deletes the in-tree one with it.
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: migrationv1alpha1.GroupVersion.String(), Kind: "StorageVersionMigration",
				Name: m.Name, UID: m.UID, BlockOwnerDeletion: ptr.To(false),
			}},
		},
		Spec: storagemigrationv1.StorageVersionMigrationSpec{Resource: metav1.GroupResource{Group: gr.Group, Resource: gr.Resource}},
	}
}

// follow reads the in-tree migration it until it ends.
func (e InTreeExecutor) follow(ctx context.Context, run Run, it *storagemigrationv1.StorageVersionMigration) error {
	name := run.Migration.Name
	clk := e.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	interval := cmpOr(e.Interval, time.Second)
	for {
		switch {
		case intree.Ended(it) && intree.Succeeded(it):
			return nil
		case intree.Ended(it):
			return &operation.TerminalError{Reason: ReasonInTreeMigrationFailed, Err: errors.New("in-tree migration " + name + " failed: " + intree.Message(it))}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-clk.After(interval):
		}
		if err := e.Reader.Get(ctx, client.ObjectKey{Name: name}, it); err != nil {
			if apierrors.IsNotFound(err) {
				// Deleted by someone: transient, the next run creates it again.
				return fmt.Errorf("the in-tree migration %s was deleted before it ended", name)
			}
			return fmt.Errorf("read the in-tree migration %s: %w", name, err)
		}
	}
}

func cmpOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
