// Package admission tells which admission webhook or policy refused a
// write, from the API server's answer, and, before any write, which ones
// the API server's rules would ask about it (Checks.Matching).
//
// svm's write changes no field, yet a webhook or a ValidatingAdmissionPolicy
// written after the objects were may refuse it, and leave the object stored
// in an old version. What the user can do about it depends on who refused:
// change that webhook or policy, or let svm re-store the object through
// its status subresource, which most policies do not cover. So svm names
// the refuser, counts the objects each refused, and tells a denial apart
// from everything else an API server may answer (a conflict, an invalid
// object, a conversion failure, RBAC).
//
// The API server says who refused only in its message, in words that have
// stood since admission webhooks (1.9) and validating admission policies
// (1.26) came: `admission webhook "NAME" denied the request[: MESSAGE]`,
// and `ValidatingAdmissionPolicy 'NAME' with binding 'BINDING' denied
// request: MESSAGE`. The status code is the webhook's own choice (400
// when it gives none) or the policy's reason, so it tells nothing.
//
// Before writing, the rules tell which webhooks and policies would be
// asked; not which objects they refuse, which selectors, match
// conditions and the checks themselves decide per object.
package admission

import (
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// Kind is what refused a write.
type Kind string

const (
	// Webhook is a validating or mutating admission webhook.
	Webhook Kind = "Webhook"
	// Policy is a ValidatingAdmissionPolicy, through one of its bindings.
	Policy Kind = "ValidatingAdmissionPolicy"
)

// Denial is who refused a write, and what the API server said.
type Denial struct {
	Kind Kind
	// Name is the webhook's name or the policy's.
	Name string
	// Binding is the policy binding that applied the policy; "" for a
	// webhook.
	Binding string
	// Message is the API server's message, at most MaxMessage bytes:
	// the refuser's own words, never the object's contents, which the
	// API server does not quote.
	Message string
}

// MaxMessage bounds a Denial's message.
const MaxMessage = 512

// Denied tells whether err is the API server's answer that an admission
// webhook or policy refused the write, and which.
func Denied(err error) (Denial, bool) {
	var status apierrors.APIStatus
	if err == nil || !errors.As(err, &status) {
		return Denial{}, false
	}
	msg := status.Status().Message
	d, ok := parse(msg)
	if !ok {
		return Denial{}, false
	}
	if len(msg) > MaxMessage {
		msg = msg[:MaxMessage] + "..."
	}
	d.Message = msg
	return d, true
}

const (
	webhookPrefix = `admission webhook "`
	webhookSuffix = `" denied the request`
	policyPrefix  = `ValidatingAdmissionPolicy '`
	policyBinding = `' with binding '`
	policySuffix  = `' denied request`
)

// parse finds the refuser in an API server's message.
func parse(msg string) (Denial, bool) {
	if _, rest, ok := strings.Cut(msg, webhookPrefix); ok {
		if name, _, ok := strings.Cut(rest, webhookSuffix); ok && name != "" && !strings.Contains(name, `"`) {
			return Denial{Kind: Webhook, Name: name}, true
		}
	}
	if _, rest, ok := strings.Cut(msg, policyPrefix); ok {
		if name, rest, ok := strings.Cut(rest, policyBinding); ok && name != "" && !strings.Contains(name, "'") {
			if binding, _, ok := strings.Cut(rest, policySuffix); ok && binding != "" && !strings.Contains(binding, "'") {
				return Denial{Kind: Policy, Name: name, Binding: binding}, true
			}
		}
	}
	return Denial{}, false
}

// Refused says who refused how many objects' writes, and what it said, in
// the words svm uses for it everywhere: a migration's Failed condition,
// svm migrate's summary, svm status. subresource is "status" when it
// refused the write through the status subresource, "" otherwise.
func (d Denial) Refused(objects int64, subresource string) string {
	through := ""
	if subresource != "" {
		through = " through the " + subresource + " subresource"
	}
	return fmt.Sprintf("%s refused %d objects%s: %s", d.Who(), objects, through, d.Message)
}

// Who names the refuser as svm's messages do: "admission webhook NAME",
// or "ValidatingAdmissionPolicy NAME (binding BINDING)".
func (d Denial) Who() string {
	if d.Kind == Policy {
		return "ValidatingAdmissionPolicy " + d.Name + " (binding " + d.Binding + ")"
	}
	return "admission webhook " + d.Name
}
