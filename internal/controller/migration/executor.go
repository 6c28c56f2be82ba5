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
		if req.ManagedFields, err = e.CRDs.RetiredFields(ctx, run.Resource, e.Operations); err != nil {
			return res, err
		}
		if merr := e.CRDs.Mark(ctx, run.Resource.GroupResource(), run.Migration.Name); merr != nil {
			return res, merr
		}
		defer func() { e.CRDs.Unmark(ctx, run.Resource.GroupResource(), run.Migration.Name, err) }()
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
// has no CRD or nothing is to be pruned.
func (c *CRDMarker) RetiredFields(ctx context.Context, gvr schema.GroupVersionResource, ops *operation.Operations) (*operation.ManagedFields, error) {
	crd, err := c.read(ctx, gvr.GroupResource())
	if err != nil || crd == nil {
		return nil, err
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
	crdReasonRunning   = "MigrationRunning"
	crdReasonSucceeded = "MigrationSucceeded"
	crdReasonFailed    = "MigrationFailed"
	crdReasonStopped   = "MigrationStopped"
)

// Mark sets StorageMigrating=True on gr's CRD; a resource without one is
// not a custom resource and is left alone.
func (c *CRDMarker) Mark(ctx context.Context, gr schema.GroupResource, migration string) error {
	return c.apply(ctx, gr, apiextensionsv1.ConditionTrue, crdReasonRunning, "svm migration "+migration+" is running")
}

// Unmark sets StorageMigrating=False after a run that ended with err. It
// runs even when the run was cancelled, within its own deadline, so that
// a stopped run never leaves the CRD marked; failing to is logged, not
// returned: the run's outcome stands.
func (c *CRDMarker) Unmark(ctx context.Context, gr schema.GroupResource, migration string, err error) {
	reason, message := crdReasonSucceeded, "svm migration "+migration+" succeeded"
	var terminal *operation.TerminalError
	var partial *operation.ObjectsFailedError
	switch {
	case err == nil:
	case errors.As(err, &terminal) || errors.As(err, &partial):
		reason, message = crdReasonFailed, "svm migration "+migration+" failed"
	default:
		reason, message = crdReasonStopped, "svm migration "+migration+" stopped; it resumes later"
	}
	final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if aerr := c.apply(final, gr, apiextensionsv1.ConditionFalse, reason, message); aerr != nil {
		klog.FromContext(ctx).Error(aerr, "Could not clear the CRD's StorageMigrating condition", "resource", gr)
	}
}

func (c *CRDMarker) apply(ctx context.Context, gr schema.GroupResource, status apiextensionsv1.ConditionStatus, reason, message string) error {
	if gr.Group == "" {
		return nil
	}
	name := gr.Resource + "." + gr.Group
	err := c.applyCondition(ctx, gr, status, reason, message, true)
	if unknownObservedGeneration(err) {
		// Kubernetes before 1.35 has no observedGeneration in a CRD's
		// conditions (nor an in-tree migrator to read it): the condition
		// is set without it.
		c.saidNoGeneration.Do(func() {
			klog.FromContext(ctx).Info("The API server's CRD conditions have no observedGeneration (Kubernetes before 1.35): StorageMigrating is set without it")
		})
		err = c.applyCondition(ctx, gr, status, reason, message, false)
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
// on the CRD's resourceVersion, with the CRD's generation as its
// observedGeneration when withGeneration is set.
func (c *CRDMarker) applyCondition(ctx context.Context, gr schema.GroupResource, status apiextensionsv1.ConditionStatus, reason, message string, withGeneration bool) error {
	name := gr.Resource + "." + gr.Group
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd, err := c.read(ctx, gr)
		if err != nil {
			return err
		}
		if crd == nil {
			return nil // not a custom resource, or deleted: nothing to mark
		}
		// The resourceVersion makes the write conditional: the generation
		// recorded is the one the condition speaks for, and the in-tree
		// migrator prunes storedVersions only while they match.
		cond := apiextensionsapply.CustomResourceDefinitionCondition().
			WithType(apiextensionsv1.StorageMigrating).
			WithStatus(status).
			WithLastTransitionTime(metav1.Now()).
			WithReason(reason).
			WithMessage(message)
		if withGeneration {
			cond.WithObservedGeneration(crd.Generation)
		}
		cfg := apiextensionsapply.CustomResourceDefinition(name).
			WithResourceVersion(crd.ResourceVersion).
			WithStatus(apiextensionsapply.CustomResourceDefinitionStatus().WithConditions(cond))
		_, err = c.CRDs.ApplyStatus(ctx, cfg, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
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
	// Client creates in-tree migrations; Reader reads them (a cache is
	// fine: the executor waits for a change).
	Client client.Client
	Reader client.Reader
	// Lookup finds the resource in discovery, with its storage version
	// hash, and refuses what cannot be migrated, as the engine does.
	Lookup func(context.Context, schema.GroupVersionResource) (*metav1.APIResource, error)
	// Fallback executes the resources kube-controller-manager cannot
	// (intree.CanExecute): svm's engine.
	Fallback Executor
	// Operations and CRDs, if set, move the managedFields entries that name a
	// version kube-controller-manager prunes from a CRD's storedVersions
	// once its migration succeeds, which it does not do itself (see
	// CRDMarker.RetiredFields): only the objects with such entries are
	// written, by svm's engine.
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

// moveFields moves the managedFields entries fields names, after the
// in-tree migration rewrote the objects; nothing when fields is nil.
func (e InTreeExecutor) moveFields(ctx context.Context, gvr schema.GroupVersionResource, fields *operation.ManagedFields) error {
	if fields == nil {
		return nil
	}
	fields.Only = true
	res, err := e.Operations.Run(ctx, operation.Request{Resource: gvr, ManagedFields: fields})
	klog.FromContext(ctx).Info("Moved managedFields off the versions the in-tree migration pruned", "resource", gvr.GroupResource(),
		"retired", fields.Retired, "objects", res.Progress.ManagedFieldsRewritten, "entriesLeft", res.Progress.ManagedFieldsLeft, "failed", res.Progress.Failed)
	return err
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
	// Read before kube-controller-manager prunes storedVersions.
	var fields *operation.ManagedFields
	if e.Operations != nil && e.CRDs != nil {
		if fields, err = e.CRDs.RetiredFields(ctx, run.Resource, e.Operations); err != nil {
			return res, err
		}
	}
	it, err := e.handOver(ctx, run)
	if err != nil {
		return res, err
	}
	if it == nil {
		return e.Fallback.Execute(ctx, run)
	}
	if err := run.OnDelegated(ctx, run.Migration.Name); err != nil {
		return res, err
	}
	return res, e.follow(ctx, run, it, fields)
}

// handOver returns the in-tree migration that executes run, created if
// there was none; nil, with no error, when the resource has no object and
// Fallback runs it instead.
func (e InTreeExecutor) handOver(ctx context.Context, run Run) (*storagemigrationv1.StorageVersionMigration, error) {
	m := run.Migration
	it := &storagemigrationv1.StorageVersionMigration{}
	err := e.Reader.Get(ctx, client.ObjectKey{Name: m.Name}, it)
	switch {
	case apierrors.IsNotFound(err) && e.Empty != nil:
		// An object created from now on is written in the storage
		// version: an empty resource has nothing to rewrite.
		empty, eerr := e.Empty(ctx, run.Resource)
		if eerr != nil {
			return nil, fmt.Errorf("tell whether %s has objects: %w", run.Resource.GroupResource(), eerr)
		}
		if empty {
			return nil, nil
		}
		fallthrough
	case apierrors.IsNotFound(err):
		if e.CRDs != nil {
			if err := e.CRDs.KeepStoredVersions(ctx, run.Resource.GroupResource()); err != nil {
				return nil, err
			}
		}
		it = newInTreeMigration(m, run.Resource.GroupResource())
		if err := e.Client.Create(ctx, it, client.FieldOwner(FieldManager)); err != nil {
			return nil, fmt.Errorf("create the in-tree migration %s: %w", m.Name, err)
		}
	case err != nil:
		return nil, fmt.Errorf("read the in-tree migration %s: %w", m.Name, err)
	case it.Annotations[intree.ForMigrationAnnotation] != string(m.UID):
		return nil, &operation.TerminalError{Reason: ReasonInTreeNameTaken, Err: fmt.Errorf(
			"an in-tree migration named %s exists and is not this migration's: rename one of them", m.Name)}
	}
	return it, nil
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

// follow reads the in-tree migration it until it ends, and then, if it
// succeeded, moves fields.
func (e InTreeExecutor) follow(ctx context.Context, run Run, it *storagemigrationv1.StorageVersionMigration, fields *operation.ManagedFields) error {
	name := run.Migration.Name
	clk := e.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	interval := cmpOr(e.Interval, time.Second)
	for {
		switch {
		case intree.Ended(it) && intree.Succeeded(it):
			return e.moveFields(ctx, run.Resource, fields)
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
