package migrator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/svm-project/svm/internal/admission"
)

// Class is what an error means for a migration.
type Class int

const (
	// Transient errors may go away: retry with backoff.
	Transient Class = iota
	// Skip means the object needs no rewrite: it was written, replaced or
	// deleted since it was listed.
	Skip
	// ObjectFailure is an error about one object that retrying will not fix,
	// such as an admission webhook's denial.
	ObjectFailure
	// Terminal errors stop the whole migration.
	Terminal
)

func (c Class) String() string {
	return [...]string{"Transient", "Skip", "ObjectFailure", "Terminal"}[c]
}

// Classify says what a write error means. A 404 is a Skip: the object is
// gone. One that does not name the object may be the whole resource's,
// though, and the engine confirms it with a list before it counts the
// object gone (see namesObject).
func Classify(err error) Class {
	switch {
	case apierrors.IsConflict(err), apierrors.IsNotFound(err), apierrors.IsGone(err):
		return Skip
	case isAdmissionDenial(err):
		// A webhook's or policy's no, whatever status code it chose (a
		// webhook that gives none is answered with 400, which would
		// otherwise read as svm's own bad request and stop everything).
		return ObjectFailure
	case IsTransient(err):
		// An admission webhook the API server could not call in time (or
		// at all) fails the writes it covers with 500 while the server is
		// fine. It is retried like any transient error, but once the
		// retries are spent it is this object's failure, not an outage to
		// wait out: waiting would hold the whole migration on this object
		// for as long as the webhook misbehaves, and retry it forever.
		if isWebhookCallFailure(err) {
			return ObjectFailure
		}
		return Transient
	case apierrors.IsMethodNotSupported(err), apierrors.IsUnauthorized(err), apierrors.IsBadRequest(err):
		return Terminal
	case apierrors.IsForbidden(err):
		// RBAC denies every object alike: stop. Anything else forbidden is
		// about this object (an admission webhook or policy said no).
		if isRBACDenial(err) {
			return Terminal
		}
		return ObjectFailure
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return Terminal
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return ObjectFailure
	}
	return Transient
}

// IsTransient reports whether err may go away by itself: throttling, server
// errors, timeouts and broken connections.
func IsTransient(err error) bool {
	switch {
	// An answer that is not an API status (IsUnexpectedServerError) is not
	// transient by itself: the API server answers a resource it no longer
	// serves, such as a deleted CRD's, with a plain-text 404. Its status
	// code decides, below.
	case apierrors.IsTooManyRequests(err), apierrors.IsServerTimeout(err), apierrors.IsTimeout(err),
		apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EPIPE):
		return true
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Code >= 500
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	// client-go wraps some transport failures in plain errors.
	msg := err.Error()
	return strings.Contains(msg, "connection reset") || strings.Contains(msg, "connection refused") ||
		strings.Contains(msg, "http2: client connection lost") || strings.Contains(msg, "unexpected EOF")
}

// namesObject reports whether err, a 404, is the API server's own answer
// that the object named name is not there: a status whose details name it.
// The answer for a resource the server does not serve (its CRD deleted,
// its APIService removed) names no object: the plain-text "404 page not
// found" of the server's last handler, which client-go reads as "the
// server could not find the requested resource". client-go gives that
// answer the name of the object asked for when it built the request from
// one (the metadata and dynamic clients), so an answer it made up
// (IsUnexpectedServerError) names nothing either. A 404 that does not
// name the object may be the resource's: the engine asks with a list
// (run.confirmServed) rather than take it for one object's deletion.
func namesObject(err error, name string) bool {
	var status apierrors.APIStatus
	if !apierrors.IsNotFound(err) || apierrors.IsUnexpectedServerError(err) || !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d != nil && name != "" && d.Name == name
}

// isAdmissionDenial reports whether an admission webhook or policy
// refused the write (admission.Denied).
func isAdmissionDenial(err error) bool {
	_, ok := admission.Denied(err)
	return ok
}

// isWebhookCallFailure reports whether err is kube-apiserver's answer when
// calling an admission webhook failed and its failurePolicy is Fail.
func isWebhookCallFailure(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status) && status.Status().Code == 500 &&
		strings.Contains(status.Status().Message, "failed calling webhook \"")
}

// isRBACDenial tells the authorizer's refusal, which kube-apiserver words
// `<resource> ["<name>"] is forbidden: User "<user>" cannot <verb> ...`,
// from an admission webhook's or policy's, whose own words may quote a user
// and say "cannot" too. Only the server's message counts, not the context
// svm or client-go wrapped around it.
func isRBACDenial(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	msg := status.Status().Message
	if strings.HasPrefix(msg, "admission webhook ") {
		return false
	}
	_, rest, ok := strings.Cut(msg, " is forbidden: ")
	return ok && strings.HasPrefix(rest, `User "`) && strings.Contains(rest, " cannot ")
}

// Reasons the engine's TerminalErrors give: the Failed condition's reason,
// and pkg/migrate's.
const (
	// ReasonResourceNotFound: the API server does not serve the resource,
	// when the migration starts or no longer, mid-run (its CRD deleted, its
	// APIService removed): a list or a write answered 404 and a list
	// confirmed it.
	ReasonResourceNotFound = "ResourceNotFound"
	// ReasonNotMigratable: the resource cannot be both listed and patched.
	ReasonNotMigratable = "NotMigratable"
	// ReasonForbidden: RBAC denies a list or a write.
	ReasonForbidden = "Forbidden"
	// ReasonDiscoveryFailed: discovery answered with an error no retry
	// can fix.
	ReasonDiscoveryFailed = "DiscoveryFailed"
	// ReasonListFailed and ReasonWriteFailed: the API server refused a
	// list, or a write for a reason that holds for every object alike.
	ReasonListFailed  = "ListFailed"
	ReasonWriteFailed = "WriteFailed"
	// ReasonStatusForbidden: RBAC denies svm the patch of the status
	// subresource that Request.ThroughStatus asked for.
	ReasonStatusForbidden = "StatusWriteForbidden"
	// ReasonManagedFieldsLost: the API server stored an object svm wrote
	// without any of its managedFields entries (see entries.go): its field
	// manager failed and cleared them, as kube-apiserver before 1.37 does
	// when a conversion webhook is down. The run stops at the first such
	// answer; the object is named among the failed.
	ReasonManagedFieldsLost = "ManagedFieldsLost"
	// ReasonManagedFieldsAtRisk: on an API server that clears managedFields
	// when its field manager fails, a dry run of the write of an object
	// whose entries need converting answered without them: the run stops
	// before writing any such object.
	ReasonManagedFieldsAtRisk = "ManagedFieldsAtRisk"
)

// TerminalError stops a migration: retrying will not help.
type TerminalError struct {
	// Reason is a CamelCase reason for the Failed condition.
	Reason string
	Err    error
}

func (e *TerminalError) Error() string { return e.Err.Error() }
func (e *TerminalError) Unwrap() error { return e.Err }

func terminal(reason, format string, args ...any) *TerminalError {
	return &TerminalError{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// ObjectsFailedError reports that some objects could not be rewritten; the
// others were.
type ObjectsFailedError struct {
	Count int64
}

func (e *ObjectsFailedError) Error() string {
	return fmt.Sprintf("%d objects could not be rewritten", e.Count)
}
