package operation

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestWrap(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "example.com", Resource: "widgets"}, "", errors.New("no"))
	tests := []struct {
		name          string
		err           error
		wantReason    string // of a *TerminalError
		wantFailed    int64  // of an *ObjectsFailedError
		wantTransient bool
		wantCause     error
	}{
		{name: "terminal", err: &TerminalError{Reason: "Forbidden", Err: forbidden}, wantReason: ReasonForbidden, wantCause: forbidden},
		{name: "objects failed", err: &ObjectsFailedError{Count: 3}, wantFailed: 3},
		{name: "transient", err: fmt.Errorf("list widgets: %w", apierrors.NewServiceUnavailable("busy")), wantTransient: true},
		{name: "cancelled", err: context.Canceled, wantCause: context.Canceled},
		{name: "deadline", err: context.DeadlineExceeded, wantCause: context.DeadlineExceeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := wrap("widgets.example.com", tt.err)
			if err != nil && !strings.HasPrefix(err.Error(), "migrate widgets.example.com: ") {
				t.Errorf("wrap(%v) = %q, which does not name the resource first", tt.err, err)
			}
			var terminal *TerminalError
			if got := errors.As(err, &terminal); got != (tt.wantReason != "") {
				t.Errorf("wrap(%v) is a *TerminalError: %v, want %v", tt.err, got, tt.wantReason != "")
			} else if got && terminal.Reason != tt.wantReason {
				t.Errorf("reason = %q, want %q", terminal.Reason, tt.wantReason)
			}
			var failed *ObjectsFailedError
			if got := errors.As(err, &failed); got != (tt.wantFailed > 0) {
				t.Errorf("wrap(%v) is an *ObjectsFailedError: %v, want %v", tt.err, got, tt.wantFailed > 0)
			} else if got && failed.Count != tt.wantFailed {
				t.Errorf("count = %d, want %d", failed.Count, tt.wantFailed)
			}
			if IsTransient(err) != tt.wantTransient {
				t.Errorf("IsTransient(%v) = %v, want %v", err, !tt.wantTransient, tt.wantTransient)
			}
			if tt.wantCause != nil && !errors.Is(err, tt.wantCause) {
				t.Errorf("wrap(%v) = %v, which does not wrap %v", tt.err, err, tt.wantCause)
			}
		})
	}
	if wrap("widgets", nil) != nil {
		t.Error("wrap(nil) is not nil")
	}
}

func TestIsTransient(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"terminal", &TerminalError{Reason: ReasonForbidden, Err: errors.New("no")}, false},
		{"wrapped terminal", fmt.Errorf("x: %w", &TerminalError{Reason: ReasonForbidden, Err: errors.New("no")}), false},
		{"objects failed", fmt.Errorf("x: %w", &ObjectsFailedError{Count: 1}), false},
		{"cancelled", fmt.Errorf("x: %w", context.Canceled), false},
		{"deadline", context.DeadlineExceeded, false},
		{"the CRD changed", fmt.Errorf("crd x: %w: why", ErrCRDChanged), true},
		{"an outage", apierrors.NewServiceUnavailable("busy"), true},
	}
	for _, tt := range tests {
		if got := IsTransient(tt.err); got != tt.want {
			t.Errorf("IsTransient(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}
