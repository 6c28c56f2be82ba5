package operation

import (
	"context"
	"errors"
	"fmt"

	"github.com/svm-project/svm/internal/migrator"
)

// Reasons a TerminalError gives. The list may grow: compare with the
// constants, and treat an unknown reason like any other terminal one.
const (
	// ReasonResourceNotFound: the API server does not serve the resource
	// (a CRD not yet established, a mistyped group or version).
	ReasonResourceNotFound = migrator.ReasonResourceNotFound
	// ReasonNotMigratable: the resource cannot be both listed and patched.
	ReasonNotMigratable = migrator.ReasonNotMigratable
	// ReasonForbidden: RBAC denies a list, a patch, or the CRD's read or
	// status update (see the package documentation for the RBAC needed).
	ReasonForbidden = migrator.ReasonForbidden
	// ReasonDiscoveryFailed: discovery answered with an error no retry
	// can fix.
	ReasonDiscoveryFailed = migrator.ReasonDiscoveryFailed
	// ReasonListFailed and ReasonWriteFailed: the API server refused a
	// list, or a write for a reason that holds for every object alike.
	ReasonListFailed  = migrator.ReasonListFailed
	ReasonWriteFailed = migrator.ReasonWriteFailed
	// ReasonManagedFieldsLost: the API server stored an object svm wrote
	// without its managedFields entries (its field manager failed: a
	// conversion webhook down, on kube-apiserver before 1.37); the run
	// stopped there, the object named among the failed.
	ReasonManagedFieldsLost = migrator.ReasonManagedFieldsLost
	// ReasonManagedFieldsAtRisk: on kube-apiserver before 1.37, a dry run
	// showed that writing an object whose entries need converting would
	// clear them; the run stopped before writing any.
	ReasonManagedFieldsAtRisk = migrator.ReasonManagedFieldsAtRisk
	// ReasonCRDNotFound: the named CustomResourceDefinition does not
	// exist, or was deleted while its resource was being migrated.
	ReasonCRDNotFound = "CRDNotFound"
	// ReasonNotServed: the CRD serves no version to write through.
	ReasonNotServed = "NotServed"
	// ReasonInvalidOptions: an Options field is out of range.
	ReasonInvalidOptions = "InvalidOptions"
)

// TerminalError means that calling again will not help until something
// else changes: the resource is not served, RBAC forbids the requests, the
// options are wrong. Its Reason is a CamelCase word for why, one of the
// Reason constants; its Err the cause, with the API server's answer where
// there was one (apierrors.IsForbidden and the like work on it). The
// engine's own type: one error from the engine to every caller.
type TerminalError = migrator.TerminalError

// ObjectsFailedError means that some objects could not be rewritten, for
// reasons about each of them (an admission webhook or policy denied the
// write, say); every other object was. Result.FailedObjects names them.
// Calling again rewrites them once whatever refused them allows it.
type ObjectsFailedError = migrator.ObjectsFailedError

// ErrCRDChanged means that a CRD's generation, storage version or
// identity changed while its resource was being migrated: the migration
// proves nothing about the new storage version, so storedVersions were
// left alone. Calling CRD again migrates to the new one.
var ErrCRDChanged = errors.New("the CRD changed while its resource was being migrated")

// IsTransient reports whether err may go away when the same call is made
// again later, with nothing else changed: the API server was unavailable
// or throttled beyond the engine's own retries, a CRD changed during its
// migration, the API server had not yet taken up a CRD's new storage
// version. It is false for nil, a *TerminalError, an *ObjectsFailedError,
// and the context's own cancellation or deadline.
func IsTransient(err error) bool {
	var terminal *TerminalError
	var failed *ObjectsFailedError
	switch {
	case err == nil, errors.As(err, &terminal), errors.As(err, &failed),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	}
	return true
}

// wrap says which resource an error of the engine is about, once,
// keeping its type (errors.As finds a *TerminalError or an
// *ObjectsFailedError) and its cause.
func wrap(resource string, err error) error {
	var terminal *TerminalError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &terminal):
		return &TerminalError{Reason: terminal.Reason, Err: fmt.Errorf("migrate %s: %w", resource, terminal.Err)}
	}
	return fmt.Errorf("migrate %s: %w", resource, err)
}

func terminal(reason string, format string, args ...any) *TerminalError {
	return &TerminalError{Reason: reason, Err: fmt.Errorf(format, args...)}
}
