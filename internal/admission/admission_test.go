package admission

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var widgets = schema.GroupResource{Group: "example.com", Resource: "widgets"}

// statusErr is an API server's answer with the given code and message,
// as the client decodes it.
func statusErr(code int32, msg string) error {
	err := apierrors.NewBadRequest(msg)
	err.ErrStatus.Code = code
	return err
}

func TestDenied(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Denial
		ok   bool
	}{{
		name: "a webhook's denial with a message, forbidden",
		err:  apierrors.NewForbidden(widgets, "w-1", errors.New(`admission webhook "deny.example.com" denied the request: widgets are frozen`)),
		want: Denial{Kind: Webhook, Name: "deny.example.com"}, ok: true,
	}, {
		name: "a webhook's denial without a code, which the API server answers with 400",
		err:  statusErr(400, `admission webhook "deny.example.com" denied the request without explanation`),
		want: Denial{Kind: Webhook, Name: "deny.example.com"}, ok: true,
	}, {
		name: "a policy's denial",
		err: apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "web",
			errors.New(`ValidatingAdmissionPolicy 'frozen.example.com' with binding 'frozen-binding' denied request: failed expression: false`)),
		want: Denial{Kind: Policy, Name: "frozen.example.com", Binding: "frozen-binding"}, ok: true,
	}, {
		name: "a policy's denial as Invalid",
		err:  statusErr(422, `deployments.apps "web" is invalid: : ValidatingAdmissionPolicy 'p' with binding 'b' denied request: no`),
		want: Denial{Kind: Policy, Name: "p", Binding: "b"}, ok: true,
	}, {
		name: "a webhook that could not be called refused nothing",
		err:  apierrors.NewInternalError(errors.New(`failed calling webhook "validate.example.com": failed to call webhook: context deadline exceeded`)),
	}, {
		name: "RBAC",
		err:  apierrors.NewForbidden(widgets, "w-1", errors.New(`User "svm" cannot patch resource "widgets/status" in API group "example.com"`)),
	}, {
		name: "a conflict",
		err:  apierrors.NewConflict(widgets, "w-1", errors.New("the object has been modified")),
	}, {
		name: "an invalid object",
		err:  statusErr(422, `widgets.example.com "w-1" is invalid: spec.size: Invalid value: -1`),
	}, {
		name: "not the API server's answer, whatever it says",
		err:  fmt.Errorf(`admission webhook "deny.example.com" denied the request`),
	}, {
		name: "a message that only quotes the words",
		err:  statusErr(500, `conversion webhook for example.com/v1 failed: admission webhook "a" b" denied the request`),
	}, {
		name: "nil",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Denied(tt.err)
			if ok != tt.ok {
				t.Fatalf("Denied(%v) = %+v, %v; want ok %v", tt.err, got, ok, tt.ok)
			}
			if !ok {
				return
			}
			var status apierrors.APIStatus
			errors.As(tt.err, &status)
			tt.want.Message = status.Status().Message
			if got != tt.want {
				t.Errorf("Denied = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDeniedBoundsTheMessage(t *testing.T) {
	long := `admission webhook "deny.example.com" denied the request: ` + strings.Repeat("x", 2*MaxMessage)
	got, ok := Denied(apierrors.NewForbidden(widgets, "w-1", errors.New(long)))
	if !ok || len(got.Message) != MaxMessage+len("...") || got.Name != "deny.example.com" {
		t.Errorf("Denied = %d bytes, %+v; want the name and a message of %d bytes and an ellipsis", len(got.Message), ok, MaxMessage)
	}
}

func FuzzDenied(f *testing.F) {
	for _, s := range []string{
		`admission webhook "deny.example.com" denied the request: no`,
		`ValidatingAdmissionPolicy 'p' with binding 'b' denied request: no`,
		`admission webhook "" denied the request`, `ValidatingAdmissionPolicy '' with binding '' denied request`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		d, ok := Denied(apierrors.NewForbidden(widgets, "w", errors.New(msg)))
		if !ok {
			return
		}
		if d.Name == "" || (d.Kind == Policy) != (d.Binding != "") || len(d.Message) > MaxMessage+3 {
			t.Errorf("Denied(%q) = %+v: a denial needs a name, a binding exactly for a policy, a bounded message", msg, d)
		}
		if !strings.Contains(msg, d.Name) {
			t.Errorf("Denied(%q) names %q, which the message does not", msg, d.Name)
		}
	})
}
