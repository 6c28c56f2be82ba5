package migrate

import (
	"context"

	"k8s.io/client-go/rest"

	"github.com/svm-project/svm/internal/operation"
)

// CRDResult is what CRD did: the CRD's Name and StorageVersion as read;
// Migration, what the migration of its resource did (nil when none was
// run: status.storedVersions already listed the storage version alone,
// or CRD stopped before, see its error); StoredVersionsBefore as first
// read and StoredVersionsAfter as CRD last saw, or wrote, them; whether
// it Pruned status.storedVersions to the storage version, and if not,
// NotPrunedReason; and, when it migrated though storedVersions listed the
// storage version alone, StoredBecause.
type CRDResult = operation.CRDResult

// CRD migrates the resource of the named CustomResourceDefinition to its
// storage version, then prunes the CRD's status.storedVersions to the
// storage version alone. In the same writes it moves the objects'
// managedFields entries that name a version it prunes to the version it
// writes through (see Retire), so that server-side apply keeps working
// once those versions are removed. Removing one is safe only once no
// client still uses it: Retire with Unserve waits for that.
//
// It prunes only when every object was migrated (none failed), when no
// managedFields entry was left naming a version it prunes
// (ErrManagedFieldsLeft), and only when the CRD's generation, storage
// version and UID are the ones read
// before the migration started: a migration that ran across a change of
// storage version proves nothing about the new one. The status update
// carries the CRD's resourceVersion as read; on a conflict the CRD is read
// again and the decision made again, never carried across a change.
//
// When storedVersions already list the storage version alone, CRD does
// not take their word for it: a failed in-tree migration of the resource
// (kube-controller-manager cuts storedVersions when one starts), svm's
// StorageState listing another version, or objects older than the CRD
// (left from an earlier CRD of that name) say another may still be
// stored, and CRD then migrates all the same. It reads those and lists the
// objects' metadata once; when none says so there is nothing to migrate
// from, and CRD returns without a write: call it as often as you like. (To
// rewrite the objects anyway, after an encryption key rotation say, use
// Resource.)
//
// Errors are those of Resource, a *TerminalError about the CRD
// (ReasonCRDNotFound, ReasonForbidden, ReasonCRDRejected, ReasonNotServed),
// ErrCRDChanged when the CRD changed during the migration, and a
// transient error when the API server had not yet taken up the CRD's
// storage version (its discovery still reports another): call again
// shortly. The CRDResult says what was done in every case.
func CRD(ctx context.Context, cfg *rest.Config, name string, opts Options) (CRDResult, error) {
	ops, err := connect(cfg, opts)
	if err != nil {
		return CRDResult{Name: name}, err
	}
	return ops.CRD(ctx, name)
}
