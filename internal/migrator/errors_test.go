package migrator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestClassify(t *testing.T) {
	gr := schema.GroupResource{Group: "example.com", Resource: "widgets"}
	webhookDenial := apierrors.NewForbidden(gr, "w1", errors.New(`admission webhook "deny.example.com" denied the request: no`))
	webhookDenialBadRequest := apierrors.NewBadRequest(`admission webhook "deny.example.com" denied the request without explanation`)
	rbacDenial := apierrors.NewForbidden(gr, "w1", errors.New(`User "system:serviceaccount:svm:svm" cannot patch resource "widgets" in API group "example.com"`))
	// What kube-apiserver answers when a webhook with failurePolicy Fail
	// times out: retried as transient (IsTransient), then failed.
	webhookTimeout := apierrors.NewInternalError(errors.New(`failed calling webhook "validate.example.com": failed to call webhook: Post "https://127.0.0.1:1/review?timeout=1s": context deadline exceeded`))
	tests := []struct {
		name string
		err  error
		want Class
	}{
		{"conflict", apierrors.NewConflict(gr, "w1", errors.New("the object has been modified")), Skip},
		{"not found", apierrors.NewNotFound(gr, "w1"), Skip},
		{"too many requests", apierrors.NewTooManyRequests("slow down", 1), Transient},
		{"internal error", apierrors.NewInternalError(errors.New("etcd down")), Transient},
		{"service unavailable", apierrors.NewServiceUnavailable("starting"), Transient},
		{"server timeout", apierrors.NewServerTimeout(gr, "patch", 1), Transient},
		{"gateway timeout", apierrors.NewTimeoutError("slow", 1), Transient},
		{"connection reset", fmt.Errorf("patch: %w", syscall.ECONNRESET), Transient},
		{"connection refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, Transient},
		{"unexpected EOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), Transient},
		{"webhook denial", webhookDenial, ObjectFailure},
		{"webhook denial without a code, answered with 400", webhookDenialBadRequest, ObjectFailure},
		{"policy denial", apierrors.NewForbidden(gr, "w1", errors.New(`ValidatingAdmissionPolicy 'frozen' with binding 'frozen' denied request: no`)), ObjectFailure},
		{"webhook not answering", webhookTimeout, ObjectFailure},
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Kind: "Widget"}, "w1", nil), ObjectFailure},
		{"rbac denial", rbacDenial, Terminal},
		{"method not allowed", apierrors.NewMethodNotSupported(gr, "patch"), Terminal},
		{"unauthorized", apierrors.NewUnauthorized("token expired"), Terminal},
		{"bad request", apierrors.NewBadRequest("bad patch"), Terminal},
		{"cancelled", context.Canceled, Terminal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.err); got != tt.want {
				t.Errorf("Classify(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// TestNamesObject tells a 404 about the object written (the object is
// gone: a skip) from one that names no object, which may be the whole
// resource's (its CRD deleted, its APIService removed) and is confirmed
// with a list before the object is counted gone.
func TestNamesObject(t *testing.T) {
	gr := schema.GroupResource{Group: "wardle.example.com", Resource: "flunders"}
	// The plain-text "404 page not found" of kube-apiserver's last
	// handler, as client-go reads it: through AbsPath (the engine's own
	// requests) it names nothing; through a client that knew the name (the
	// metadata and dynamic clients) client-go names the object itself.
	plain := apierrors.NewGenericServerResponse(404, "PATCH", schema.GroupResource{}, "", "404 page not found", 0, true)
	plainNamed := apierrors.NewGenericServerResponse(404, "PATCH", gr, "f1", "404 page not found", 0, true)
	// A status without details: what an aggregated server not built on
	// k8s.io/apiserver may answer for a path it does not serve.
	bare := &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 404, Reason: metav1.StatusReasonNotFound,
		Message: "the server could not find the requested resource"}}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"the server's 404 names the object", apierrors.NewNotFound(gr, "f1"), true},
		{"through the status subresource", fmt.Errorf("through its status subresource: %w", apierrors.NewNotFound(gr, "f1")), true},
		{"names another object", apierrors.NewNotFound(gr, "f2"), false},
		{"resource not served, through AbsPath", plain, false},
		{"resource not served, named by client-go", plainNamed, false},
		{"a status without details", bare, false},
		{"conflict naming the object", apierrors.NewConflict(gr, "f1", errors.New("the object has been modified")), false},
		{"aggregator: APIService unavailable", apierrors.NewGenericServerResponse(503, "PATCH", schema.GroupResource{}, "", "service unavailable", 0, true), false},
		{"not an API status", errors.New("404 page not found"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := namesObject(tt.err, "f1"); got != tt.want {
				t.Errorf("namesObject(%v, f1) = %v, want %v", tt.err, got, tt.want)
			}
			// Classify is the same for all: a 404 is a skip, whatever it
			// names; the engine confirms one that names no object.
			if got := Classify(tt.err); apierrors.IsNotFound(tt.err) && got != Skip {
				t.Errorf("Classify(%v) = %v, want Skip", tt.err, got)
			}
		})
	}
}

func TestNewerThan(t *testing.T) {
	tests := []struct {
		rv, checkpoint string
		want           bool
	}{
		{"101", "100", true},
		{"100", "100", false},
		{"99", "100", false},
		{"1000", "999", true}, // numeric, not lexical
		{"101", "", false},
		{"abc", "100", false},
	}
	for _, tt := range tests {
		if got := newerThan(tt.rv, tt.checkpoint); got != tt.want {
			t.Errorf("newerThan(%q, %q) = %v, want %v", tt.rv, tt.checkpoint, got, tt.want)
		}
	}
}

func TestIsTransientFollowsTheStatusCode(t *testing.T) {
	gr := schema.GroupResource{Group: "example.com", Resource: "widgets"}
	// What client-go makes of answers that are not an API status, such as
	// the plain-text 404 for a resource no longer served, or a proxy's 502.
	tests := []struct {
		code int
		want bool
	}{
		{404, false},
		{403, false},
		{429, true},
		{500, true},
		{502, true},
		{503, true},
		{504, true},
	}
	for _, tt := range tests {
		err := apierrors.NewGenericServerResponse(tt.code, "patch", gr, "w1", "a plain-text body", 0, true)
		if !apierrors.IsUnexpectedServerError(err) {
			t.Fatalf("%d: %v is not an unexpected server response; the test proves nothing", tt.code, err)
		}
		if got := IsTransient(err); got != tt.want {
			t.Errorf("IsTransient(%d %v) = %v, want %v", tt.code, err, got, tt.want)
		}
	}
}
