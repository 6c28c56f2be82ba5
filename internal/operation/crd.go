package operation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsv1client "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/svm-project/svm/internal/crdversions"
	"github.com/svm-project/svm/internal/maybestored"
	"github.com/svm-project/svm/internal/migrator"
	"github.com/svm-project/svm/internal/resources"
)

// More reasons a TerminalError gives, about the CRD itself.
const (
	// ReasonCRDRejected: the API server refused to read the CRD or to
	// update its status for a reason no retry fixes.
	ReasonCRDRejected = "CRDRejected"
)

// maxPruneAttempts bounds the updates of a CRD's status that may meet a
// conflict: each conflict is followed by a fresh read and a fresh
// decision, and a CRD that keeps changing is left for a later call.
const maxPruneAttempts = 5

// CRDResult is what CRD did.
type CRDResult struct {
	// Name is the CRD's name.
	Name string
	// StorageVersion is the CRD's storage version when CRD read it.
	StorageVersion string
	// Migration is what the migration of the CRD's resource did, nil
	// when none was run: status.storedVersions already listed the
	// storage version alone, or CRD stopped before (see its error).
	Migration *Result
	// StoredVersionsBefore is status.storedVersions as first read;
	// StoredVersionsAfter is what CRD last saw, or wrote.
	StoredVersionsBefore, StoredVersionsAfter []string
	// Pruned is whether CRD cut status.storedVersions to the storage
	// version.
	Pruned bool
	// NotPrunedReason says why storedVersions were not pruned, "" when
	// they were.
	NotPrunedReason string
	// StoredBecause, when storedVersions list the storage version alone,
	// says why objects may still be stored in another
	// (maybestored): why CRD migrated all the same.
	StoredBecause string
}

// storedBesides answers whether objects of crd may be stored in a version
// other than its storage version, though its storedVersions list that
// alone: the first version maybestored says may be, after counting the
// objects created before crd (one list of their metadata).
func (o *Operations) storedBesides(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition) (maybestored.Answer, error) {
	storage := crdversions.StorageVersion(crd)
	gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: storage, Resource: crd.Spec.Names.Plural}
	n, err := o.engine.Count(ctx, gvr, nil, crd.CreationTimestamp.Time)
	if err != nil {
		return maybestored.Answer{}, wrap(resources.DisplayName(gvr.GroupResource()), err)
	}
	var a maybestored.Answer
	for _, v := range crd.Spec.Versions {
		if v.Name == storage {
			continue
		}
		e, err := o.Evidence(ctx, gvr.GroupResource().WithVersion(v.Name), crd.Spec.Names.Kind, crd)
		if err != nil {
			return a, err
		}
		e.CreatedBeforeCRD = n.CreatedBefore
		if a = maybestored.Of(e); a.MayBeStored {
			return a, nil
		}
	}
	return a, nil
}

// CRD migrates the resource of the named CustomResourceDefinition to its
// storage version, moving the managedFields entries that name a version
// it prunes (FieldsToMove), and then prunes status.storedVersions to the
// storage version alone, as crdversions.DecidePrune allows. What it
// promises, and its errors, are pkg/migrate.CRD's.
func (o *Operations) CRD(ctx context.Context, name string) (CRDResult, error) {
	out := CRDResult{Name: name}
	crd, err := o.clients.CRDs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return out, crdError("read", name, err)
	}
	start := crdversions.Of(crd)
	out.StorageVersion = start.StorageVersion
	out.StoredVersionsBefore = slices.Clone(start.StoredVersions)
	out.StoredVersionsAfter = slices.Clone(start.StoredVersions)
	if start.StorageVersion == "" {
		// The API server validates that there is one; say so rather
		// than prune to nothing should one ever lack it.
		out.NotPrunedReason = "the CRD has no storage version"
		return out, terminal(ReasonCRDRejected, "customresourcedefinition %s has no storage version", name)
	}
	if start.OnlyStorage() {
		a, err := o.storedBesides(ctx, crd)
		if err != nil {
			return out, err
		}
		if !a.MayBeStored {
			out.NotPrunedReason = "status.storedVersions lists only the storage version, and nothing else says another may be stored: nothing to migrate from"
			return out, nil
		}
		out.StoredBecause = a.String()
	}
	version, ok := crdversions.Kept(crd, "")
	if !ok {
		out.NotPrunedReason = "the CRD serves no version"
		return out, terminal(ReasonNotServed, "customresourcedefinition %s serves no version", name)
	}
	gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: version, Resource: crd.Spec.Names.Plural}
	return o.migrateAndPrune(ctx, crd, gvr, out)
}

// migrateAndPrune migrates crd's resource through gvr, moving the
// managedFields entries that name a version it prunes, and then prunes
// storedVersions to the storage version, as CRD says; out is the result so
// far.
func (o *Operations) migrateAndPrune(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition, gvr schema.GroupVersionResource, out CRDResult) (CRDResult, error) {
	start := crdversions.Of(crd)
	want := resources.StorageVersionHash(crd.Spec.Group, start.StorageVersion, crd.Spec.Names.Kind)
	if err := o.waitForDrain(ctx, crd, o.clients.Clock.Now()); err != nil {
		out.NotPrunedReason = "stopped while waiting for writes under the previous storage version to land"
		return out, err
	}
	// The API server takes up a CRD's new storage version a moment after
	// the CRD changes; objects rewritten before then would be stored in
	// the old one again. Discovery reports which it stores.
	info, err := o.engine.Lookup(ctx, gvr)
	if err != nil {
		out.NotPrunedReason = "the resource could not be migrated"
		return out, wrap(resources.DisplayName(gvr.GroupResource()), err)
	}
	if err := storageTakenUp(info.StorageVersionHash, want, gvr, start.StorageVersion); err != nil {
		out.NotPrunedReason = "the API server does not store the storage version yet"
		return out, err
	}

	// The versions pruned from storedVersions are the ones their removal
	// from the CRD then allows: their managedFields entries move in the
	// same writes, or server-side apply breaks once they are removed.
	mf, err := o.FieldsToMove(ctx, crd, "")
	if err != nil {
		return out, err
	}
	res, hash, err := o.migrate(ctx, gvr, mf)
	out.Migration = &res
	if err != nil {
		out.NotPrunedReason = "the migration did not complete"
		if res.Failed > 0 {
			out.NotPrunedReason = fmt.Sprintf("%d objects could not be rewritten", res.Failed)
		}
		return out, err
	}
	if err := storageTakenUp(hash, want, gvr, start.StorageVersion); err != nil {
		out.NotPrunedReason = "the API server does not store the storage version yet"
		return out, err
	}
	return prune(ctx, o.clients.CRDs.ApiextensionsV1().CustomResourceDefinitions(), start, res.Counts, o.fieldManager(), out)
}

// prune cuts the CRD's storedVersions to start's storage version, if the
// CRD as read now and what the migration did (its counts) still allow it.
func prune(ctx context.Context, crds apiextensionsv1client.CustomResourceDefinitionInterface, start crdversions.Storage, did Counts, fieldManager string, out CRDResult) (CRDResult, error) {
	for range maxPruneAttempts {
		crd, err := crds.Get(ctx, out.Name, metav1.GetOptions{})
		var now *crdversions.Storage
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return out, crdError("read", out.Name, err)
		default:
			s := crdversions.Of(crd)
			now = &s
			out.StoredVersionsAfter = slices.Clone(s.StoredVersions)
		}
		verdict, why := crdversions.DecidePrune(start, now, did.Failed, did.ManagedFieldsLeft.Total())
		switch verdict {
		case crdversions.PruneNothingLeft:
			out.NotPrunedReason = why
			return out, nil
		case crdversions.PruneObjectsFailed:
			out.NotPrunedReason = why
			return out, &ObjectsFailedError{Count: did.Failed}
		case crdversions.PruneEntriesLeft:
			out.NotPrunedReason = why
			return out, fmt.Errorf("customresourcedefinition %s: %w: %d entries could not be moved (%s)", out.Name, ErrManagedFieldsLeft, did.ManagedFieldsLeft.Total(), did.ManagedFieldsLeft)
		case crdversions.PruneCRDGone:
			out.NotPrunedReason = why
			out.StoredVersionsAfter = nil
			return out, terminal(ReasonCRDNotFound, "customresourcedefinition %s: %s", out.Name, why)
		case crdversions.PruneCRDChanged:
			out.NotPrunedReason = why
			return out, fmt.Errorf("customresourcedefinition %s: %w: %s", out.Name, ErrCRDChanged, why)
		}
		// The update carries the resourceVersion just read: if anything
		// changed since, it is refused, and the loop decides again.
		updated, err := PruneStoredVersions(ctx, crds, crd, fieldManager)
		switch {
		case apierrors.IsConflict(err):
			continue
		case err != nil:
			return out, crdError("prune storedVersions of", out.Name, err)
		}
		out.Pruned, out.NotPrunedReason = true, ""
		out.StoredVersionsAfter = slices.Clone(updated.Status.StoredVersions)
		return out, nil
	}
	out.NotPrunedReason = "the CRD kept changing"
	return out, fmt.Errorf("prune storedVersions of customresourcedefinition %s: %d conflicts in a row", out.Name, maxPruneAttempts)
}

// PruneStoredVersions cuts crd's status.storedVersions to its storage
// version (crdversions.Pruned): the one write of every prune svm makes, the
// CRD operation's and the trigger's. The update carries crd's
// resourceVersion, so a CRD changed since it was read is refused with a
// conflict, never pruned on a stale decision.
func PruneStoredVersions(ctx context.Context, crds apiextensionsv1client.CustomResourceDefinitionInterface, crd *apiextensionsv1.CustomResourceDefinition, fieldManager string) (*apiextensionsv1.CustomResourceDefinition, error) {
	return crds.UpdateStatus(ctx, crdversions.Pruned(crd), metav1.UpdateOptions{FieldManager: fieldManager})
}

// waitForDrain waits until Options.CRDDrainMargin has passed since crd's
// spec last changed (drainedAt), telling Options.OnDrainWait first; now is
// the API server's time now (kubeclients.ServerClock), the clock the
// change is dated by.
func (o *Operations) waitForDrain(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition, now time.Time) error {
	until, ok := drainedAt(crd, o.opts.CRDDrainMargin, now)
	if !ok {
		return nil
	}
	wait := until.Sub(now)
	if o.opts.OnDrainWait != nil {
		// Told by this machine's clock, which whoever reads it has.
		o.opts.OnDrainWait(time.Now().Add(wait))
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// drainedAt is when no write accepted under a storage version crd had
// before its last spec change can still land: margin (0 for
// DefaultCRDDrainMargin) after that change. ok is false when that is not
// after now, or margin is negative. The change is dated by the latest
// managedFields entry of the CRD itself (not its status), a second later
// for the API server's rounding; a CRD without one is taken to have
// changed now. The change is dated by the API server's clock, so now must
// be read on it too: a workstation minutes fast would find the margin
// passed before it has.
func drainedAt(crd *apiextensionsv1.CustomResourceDefinition, margin time.Duration, now time.Time) (until time.Time, ok bool) {
	switch {
	case margin < 0:
		return time.Time{}, false
	case margin == 0:
		margin = DefaultCRDDrainMargin
	}
	changed := time.Time{}
	for _, e := range crd.ManagedFields {
		if e.Subresource == "" && e.Time != nil && e.Time.After(changed) {
			changed = e.Time.Time
		}
	}
	if changed.IsZero() {
		changed = now
	} else {
		changed = changed.Add(time.Second)
	}
	until = changed.Add(margin)
	return until, until.After(now)
}

// storageTakenUp returns a transient error unless discovery's hash, got,
// is the hash of the CRD's storage version. A server that reports no hash
// cannot be checked; the CRD's generation still is.
func storageTakenUp(got, want string, gvr schema.GroupVersionResource, storageVersion string) error {
	if got == "" || got == want {
		return nil
	}
	return fmt.Errorf("migrate %s: the API server does not store it in version %s yet (discovery reports storage version hash %s, not %s)",
		resources.DisplayName(gvr.GroupResource()), storageVersion, got, want)
}

// crdError classifies an error reading or updating a CRD.
func crdError(what, name string, err error) error {
	wrapped := fmt.Errorf("%s customresourcedefinition %s: %w", what, name, err)
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return wrapped
	case apierrors.IsNotFound(err):
		return &TerminalError{Reason: ReasonCRDNotFound, Err: wrapped}
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return &TerminalError{Reason: ReasonForbidden, Err: wrapped}
	case migrator.IsTransient(err):
		return wrapped
	}
	return &TerminalError{Reason: ReasonCRDRejected, Err: wrapped}
}
