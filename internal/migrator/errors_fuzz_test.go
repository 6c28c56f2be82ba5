package migrator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// wrap hides err under depth layers of the wrapping client-go and svm do:
// fmt.Errorf with %w and, at the bottom, *url.Error for transport failures.
func wrap(err error, depth uint8, asURL bool) error {
	if asURL {
		err = &url.Error{Op: "Patch", URL: "https://127.0.0.1:6443/apis/example.com/v1/namespaces/a/widgets/w", Err: err}
	}
	for i := range depth % 4 {
		err = fmt.Errorf("layer %d: %w", i, err)
	}
	return err
}

// statusCases are the API server's answers, with the class the design
// (docs/design.md, "Errors") gives each. The message comes from the
// fuzzer: it is whatever a webhook, a policy or the server said, and must
// not change the class, except for telling RBAC's 403 from the others.
var statusCases = []struct {
	code   int32
	reason metav1.StatusReason
	want   Class
}{
	{409, metav1.StatusReasonConflict, Skip},
	{404, metav1.StatusReasonNotFound, Skip},
	{410, metav1.StatusReasonGone, Skip},
	{429, metav1.StatusReasonTooManyRequests, Transient},
	{500, metav1.StatusReasonInternalError, Transient},
	{503, metav1.StatusReasonServiceUnavailable, Transient},
	{504, metav1.StatusReasonTimeout, Transient},
	{500, metav1.StatusReasonServerTimeout, Transient},
	{502, "", Transient},
	{401, metav1.StatusReasonUnauthorized, Terminal},
	{400, metav1.StatusReasonBadRequest, Terminal},
	{405, metav1.StatusReasonMethodNotAllowed, Terminal},
	{422, metav1.StatusReasonInvalid, ObjectFailure},
	{413, metav1.StatusReasonRequestEntityTooLarge, ObjectFailure},
	{400, "", Terminal},
}

// FuzzClassify checks Classify against the design's table of errors, for
// any message and however the error is wrapped: a class never depends on
// the words of a message that is not RBAC's, nor on how many layers of
// context were added on the way up.
func FuzzClassify(f *testing.F) {
	for i := range statusCases {
		f.Add(uint8(i), "the object has been modified", uint8(0), false)
	}
	// Words that RBAC uses, inside messages that are not RBAC's: an
	// admission webhook or policy may quote a user and say "cannot".
	f.Add(uint8(0), `User "system:serviceaccount:svm-system:svm-controller" cannot patch this object`, uint8(1), false)
	f.Add(uint8(3), "connection refused", uint8(2), true)
	f.Add(uint8(12), `spec.size: Invalid value: "x": unexpected EOF`, uint8(0), false)
	f.Add(uint8(14), "cannot parse the patch", uint8(3), true)
	f.Fuzz(func(t *testing.T, which uint8, message string, depth uint8, asURL bool) {
		gr := schema.GroupResource{Group: "example.com", Resource: "widgets"}
		check := func(what string, err error, want Class) {
			t.Helper()
			got := Classify(err)
			if got < Transient || got > Terminal || got.String() == "" {
				t.Fatalf("%s: Classify(%v) = %d, not a class", what, err, got)
			}
			if got != want {
				t.Errorf("%s: Classify(%q) = %v, want %v", what, err, got, want)
			}
			if again := Classify(wrap(err, depth, asURL)); again != got {
				t.Errorf("%s: Classify(%q) = %v, but %v once wrapped as %q", what, err, got, again, wrap(err, depth, asURL))
			}
		}

		// An answer of the API server, with its own status and the
		// fuzzer's words.
		c := statusCases[int(which)%len(statusCases)]
		check(fmt.Sprintf("status %d %s", c.code, c.reason),
			&apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: c.code, Reason: c.reason, Message: message}}, c.want)

		// A 404 is about the object written only when its details name
		// it, whatever its message says: one that names nothing may be
		// the resource's own (see namesObject).
		notFound := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 404, Reason: metav1.StatusReasonNotFound, Message: message}}
		if namesObject(wrap(notFound, depth, asURL), "w1") {
			t.Errorf("namesObject(%q) without details is true", notFound)
		}
		notFound.ErrStatus.Details = &metav1.StatusDetails{Name: "w1", Group: gr.Group, Kind: gr.Resource}
		if !namesObject(wrap(notFound, depth, asURL), "w1") {
			t.Errorf("namesObject(%q) naming w1 is false", notFound)
		}

		// RBAC's refusal, as kube-apiserver words it, for any user, stops
		// the migration: every object would be refused alike.
		user := strconv.Quote(message)
		check("rbac", apierrors.NewForbidden(gr, "w1", fmt.Errorf("User %s cannot patch resource %q in API group %q in the namespace %q", user, gr.Resource, gr.Group, "a")), Terminal)

		// A 403 from an admission webhook or a ValidatingAdmissionPolicy
		// is about this object: record it and go on, whatever it says.
		webhook := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 403, Reason: metav1.StatusReasonForbidden,
			Message: fmt.Sprintf("admission webhook %q denied the request: %s", "deny.example.com", message)}}
		check("webhook denial", webhook, ObjectFailure)
		policy := apierrors.NewForbidden(gr, "w1", fmt.Errorf("ValidatingAdmissionPolicy 'no-widgets' with binding 'no-widgets' denied request: %s", message))
		check("policy denial", policy, ObjectFailure)

		// Broken connections are transient, whatever the wrapping.
		for _, e := range []error{io.EOF, io.ErrUnexpectedEOF, syscall.ECONNRESET, syscall.ECONNREFUSED, syscall.EPIPE,
			&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}} {
			check(fmt.Sprintf("transport %v", e), e, Transient)
		}
		// So is an error svm cannot read: unknown trouble is retried, never
		// taken for an object's fault or a reason to stop.
		if got := Classify(errors.New(message)); got != Transient {
			t.Errorf("Classify(errors.New(%q)) = %v, want Transient", message, got)
		}
		// A cancelled caller stops the migration; it is nobody's fault and
		// retrying cannot help.
		if got := Classify(wrap(context.Canceled, depth, false)); got != Terminal {
			t.Errorf("Classify(%v) = %v, want Terminal", wrap(context.Canceled, depth, false), got)
		}

		// Classify and IsTransient agree: what is retried is transient.
		for _, e := range []error{webhook, policy, errors.New(message)} {
			if IsTransient(e) && Classify(e) != Transient {
				t.Errorf("IsTransient(%q) but Classify = %v", e, Classify(e))
			}
		}
	})
}

// FuzzNewerThan checks the comparison that decides whether an object was
// written after a migration's checkpoint (and needs no rewrite): it must
// be a strict order on resourceVersions, numeric rather than lexical, and
// assume nothing about values it cannot read.
func FuzzNewerThan(f *testing.F) {
	f.Add("101", "100")
	f.Add("1000", "999")
	f.Add("", "5")
	f.Add("18446744073709551616", "1")
	f.Add("+5", "4")
	f.Fuzz(func(t *testing.T, a, b string) {
		ab, ba := newerThan(a, b), newerThan(b, a)
		if ab && ba {
			t.Errorf("newerThan(%q, %q) and newerThan(%q, %q)", a, b, b, a)
		}
		if newerThan(a, a) {
			t.Errorf("newerThan(%q, %q): a version is newer than itself", a, a)
		}
		x, errA := strconv.ParseUint(a, 10, 64)
		y, errB := strconv.ParseUint(b, 10, 64)
		if errA != nil || errB != nil {
			if ab {
				t.Errorf("newerThan(%q, %q) is true for a version it cannot read", a, b)
			}
			return
		}
		if ab != (x > y) {
			t.Errorf("newerThan(%q, %q) = %v, want %v", a, b, ab, x > y)
		}
	})
}
