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
