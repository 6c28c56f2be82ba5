package migrate

import (
	"fmt"

	"github.com/svm-project/svm/internal/operation"
)

// Reasons a TerminalError gives. The list may grow: compare with the
// constants, and treat an unknown reason like any other terminal one.
const (
	// ReasonResourceNotFound: the API server does not serve the resource
	// (a CRD not yet established, a mistyped group or version).
	ReasonResourceNotFound = operation.ReasonResourceNotFound
	// ReasonNotMigratable: the resource cannot be both listed and patched.
	ReasonNotMigratable = operation.ReasonNotMigratable
	// ReasonForbidden: RBAC denies a list, a patch, or the CRD's read or
	// status update (see the package documentation for the RBAC needed).
	ReasonForbidden = operation.ReasonForbidden
	// ReasonDiscoveryFailed: discovery answered with an error no retry
	// can fix.
	ReasonDiscoveryFailed = operation.ReasonDiscoveryFailed
	// ReasonListFailed and ReasonWriteFailed: the API server refused a
	// list, or a write for a reason that holds for every object alike.
	ReasonListFailed  = operation.ReasonListFailed
	ReasonWriteFailed = operation.ReasonWriteFailed
	// ReasonManagedFieldsLost: the API server stored an object svm wrote
	// without its managedFields entries (its field manager failed: a
	// conversion webhook down, on kube-apiserver before 1.37); the run
	// stopped there, the object named among the failed.
	ReasonManagedFieldsLost = operation.ReasonManagedFieldsLost
	// ReasonManagedFieldsAtRisk: on kube-apiserver before 1.37, a dry run
	// showed that writing an object whose entries need converting would
	// clear them; the run stopped before writing any.
	ReasonManagedFieldsAtRisk = operation.ReasonManagedFieldsAtRisk
	// ReasonCRDNotFound: the named CustomResourceDefinition does not
	// exist, or was deleted while its resource was being migrated.
	ReasonCRDNotFound = operation.ReasonCRDNotFound
	// ReasonNotServed: the CRD serves no version to write through.
	ReasonNotServed = operation.ReasonNotServed
	// ReasonInvalidOptions: an Options field is out of range.
	ReasonInvalidOptions = operation.ReasonInvalidOptions
	// ReasonCRDRejected: the API server refused to read the CRD or to
	// update its status for a reason no retry fixes.
	ReasonCRDRejected = operation.ReasonCRDRejected
	// ReasonStorageVersion: the version to retire is the one objects are
	// stored in; make another the storage version first.
	ReasonStorageVersion = operation.ReasonStorageVersion
	// ReasonNoOtherVersion: no other version of the resource is served
	// for its objects to be written through and its managedFields to name.
	ReasonNoOtherVersion = operation.ReasonNoOtherVersion
	// ReasonNotACRD: only a CustomResourceDefinition's version can be
	// unserved by svm; kube-apiserver's own are served by its flags.
	ReasonNotACRD = operation.ReasonNotACRD
)

// TerminalError means that calling again will not help until something
// else changes: the resource is not served, RBAC forbids the requests, the
// options are wrong. Its Reason is a CamelCase word for why, one of the
// Reason constants; its Err is the cause, with the API server's answer
// where there was one (apierrors.IsForbidden and the like work on it).
// Test for it with errors.As.
type TerminalError = operation.TerminalError

// ObjectsFailedError means that some objects could not be rewritten, for
// reasons about each of them (an admission webhook or policy denied the
// write, say); every other object was. Result.FailedObjects names them,
// and Count says how many. Calling again rewrites them once whatever
// refused them allows it.
type ObjectsFailedError = operation.ObjectsFailedError

// ErrCRDChanged means that a CRD's generation, storage version or
// identity changed while its resource was being migrated: the migration
// proves nothing about the new storage version, so storedVersions were
// left alone. Calling CRD again migrates to the new one.
var ErrCRDChanged = operation.ErrCRDChanged

// ErrVersionInUse means that an API server answered requests for the
// version during the quiet window, or holds a watch on it open: some
// client still uses it, and serving it was not stopped. RetireResult.Usage
// says which servers.
var ErrVersionInUse = operation.ErrVersionInUse

// ErrManagedFieldsLeft means that managedFields entries still name the
// version retired: their fields could not be placed in the version kept,
// so they were left as they were, and no manager lost a field. Removing
// the version would make server-side apply fail on their objects.
// RetireResult.Migration.LeftEntries says which and why; serving the
// version was not stopped.
var ErrManagedFieldsLeft = operation.ErrManagedFieldsLeft

// ErrUsageUnknown means that whether clients still use the version could
// not be told (an API server's metrics could not be read, or it restarted
// during the quiet window): serving it was not stopped.
var ErrUsageUnknown = operation.ErrUsageUnknown

// IsTransient reports whether err may go away when the same call is made
// again later, with nothing else changed: the API server was unavailable
// or throttled beyond the engine's own retries, a CRD changed during its
// migration, the API server had not yet taken up a CRD's new storage
// version. It is false for nil, a *TerminalError, an *ObjectsFailedError,
// and the context's own cancellation or deadline.
func IsTransient(err error) bool { return operation.IsTransient(err) }

func terminal(reason string, format string, args ...any) *TerminalError {
	return &TerminalError{Reason: reason, Err: fmt.Errorf(format, args...)}
}
