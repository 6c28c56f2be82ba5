package admission

import (
	"context"
	"fmt"
	"slices"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	admissionclient "k8s.io/client-go/kubernetes/typed/admissionregistration/v1"
)

// Write is one of svm's writes, as admission rules see it: an UPDATE of
// Resource (the version svm writes through), through Subresource ("" for
// the object itself, "status" for its status subresource).
type Write struct {
	Resource    schema.GroupVersionResource
	Subresource string
	Namespaced  bool
}

// Checks are the cluster's admission webhooks and policies, as read.
type Checks struct {
	Validating []admissionregistrationv1.ValidatingWebhookConfiguration
	Mutating   []admissionregistrationv1.MutatingWebhookConfiguration
	Policies   []admissionregistrationv1.ValidatingAdmissionPolicy
	Bindings   []admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

// Check is a webhook or policy whose rules match a write: the API server
// asks it about the write, and it may refuse it.
type Check struct {
	Kind Kind
	// Name is the webhook's name or the policy's; Configuration, the
	// webhook configuration that holds the webhook; Binding, the policy
	// binding that applies the policy with the Deny action.
	Name, Configuration, Binding string
	// Mutating is set for a mutating webhook, which may change the object
	// as well as refuse it.
	Mutating bool
	// Narrowed names what limits the check to some objects only
	// (namespaceSelector, objectSelector, matchConditions, resourceNames):
	// which objects it refuses is known only by writing them.
	Narrowed []string
}

// String says which check it is, in the words of Denial.Who.
func (c Check) String() string {
	s := Denial{Kind: c.Kind, Name: c.Name, Binding: c.Binding}.Who()
	if c.Kind == Webhook {
		s += " (configuration " + c.Configuration + ")"
		if c.Mutating {
			s = "mutating " + s
		}
	}
	if len(c.Narrowed) > 0 {
		s += ", for the objects its " + strings.Join(c.Narrowed, " and ") + " select"
	}
	return s
}

// Read lists the cluster's webhook configurations and policies with their
// bindings.
func Read(ctx context.Context, c admissionclient.AdmissionregistrationV1Interface) (Checks, error) {
	var out Checks
	validating, err := c.ValidatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return out, fmt.Errorf("list validating webhook configurations: %w", err)
	}
	mutating, err := c.MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return out, fmt.Errorf("list mutating webhook configurations: %w", err)
	}
	policies, err := c.ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{})
	if err != nil {
		return out, fmt.Errorf("list validating admission policies: %w", err)
	}
	bindings, err := c.ValidatingAdmissionPolicyBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return out, fmt.Errorf("list validating admission policy bindings: %w", err)
	}
	out.Validating, out.Mutating, out.Policies, out.Bindings = validating.Items, mutating.Items, policies.Items, bindings.Items
	return out, nil
}

// Matching lists the checks whose rules match w, in the order read. It
// follows the API server's rule matching (operations, API groups,
// versions, resources with their subresources, scope), with two
// allowances that can only list more: a webhook or policy whose
// matchPolicy is Equivalent (the default) is matched whatever API version
// its rules name, as the API server matches it for an equivalent
// resource; and what selectors and match conditions would say of each
// object is not judged but named (Check.Narrowed).
func (c Checks) Matching(w Write) []Check {
	var out []Check
	for _, cfg := range c.Validating {
		for _, h := range cfg.Webhooks {
			if rulesMatch(h.Rules, h.MatchPolicy, w) {
				out = append(out, Check{Kind: Webhook, Name: h.Name, Configuration: cfg.Name,
					Narrowed: narrowed(w, h.NamespaceSelector, h.ObjectSelector, len(h.MatchConditions), false)})
			}
		}
	}
	for _, cfg := range c.Mutating {
		for _, h := range cfg.Webhooks {
			if rulesMatch(h.Rules, h.MatchPolicy, w) {
				out = append(out, Check{Kind: Webhook, Name: h.Name, Configuration: cfg.Name, Mutating: true,
					Narrowed: narrowed(w, h.NamespaceSelector, h.ObjectSelector, len(h.MatchConditions), false)})
			}
		}
	}
	for _, p := range c.Policies {
		mc := p.Spec.MatchConstraints
		if mc == nil || !resourcesMatch(mc, w) {
			continue
		}
		for _, b := range c.Bindings {
			if b.Spec.PolicyName != p.Name || !slices.Contains(b.Spec.ValidationActions, admissionregistrationv1.Deny) {
				continue
			}
			// A binding's own matchResources narrows the policy's.
			if b.Spec.MatchResources != nil && len(b.Spec.MatchResources.ResourceRules) > 0 && !resourcesMatch(b.Spec.MatchResources, w) {
				continue
			}
			n := narrowed(w, mc.NamespaceSelector, mc.ObjectSelector, len(p.Spec.MatchConditions), namedRules(mc.ResourceRules))
			if m := b.Spec.MatchResources; m != nil {
				for _, more := range narrowed(w, m.NamespaceSelector, m.ObjectSelector, 0, namedRules(m.ResourceRules)) {
					if !slices.Contains(n, more) {
						n = append(n, more)
					}
				}
			}
			out = append(out, Check{Kind: Policy, Name: p.Name, Binding: b.Name, Narrowed: n})
		}
	}
	return out
}

// resourcesMatch tells whether m's resource rules match w and its
// exclusions do not.
func resourcesMatch(m *admissionregistrationv1.MatchResources, w Write) bool {
	match := func(rules []admissionregistrationv1.NamedRuleWithOperations) bool {
		return slices.ContainsFunc(rules, func(r admissionregistrationv1.NamedRuleWithOperations) bool {
			return ruleMatches(r.RuleWithOperations, m.MatchPolicy, w)
		})
	}
	return match(m.ResourceRules) && !match(m.ExcludeResourceRules)
}

func rulesMatch(rules []admissionregistrationv1.RuleWithOperations, policy *admissionregistrationv1.MatchPolicyType, w Write) bool {
	return slices.ContainsFunc(rules, func(r admissionregistrationv1.RuleWithOperations) bool { return ruleMatches(r, policy, w) })
}

// ruleMatches is the API server's rule matching for an UPDATE of w.
func ruleMatches(r admissionregistrationv1.RuleWithOperations, policy *admissionregistrationv1.MatchPolicyType, w Write) bool {
	equivalent := policy == nil || *policy == admissionregistrationv1.Equivalent
	return scopeMatches(r.Scope, w) &&
		slices.ContainsFunc(r.Operations, func(op admissionregistrationv1.OperationType) bool {
			return op == admissionregistrationv1.OperationAll || op == admissionregistrationv1.Update
		}) &&
		exactOrWildcard(r.APIGroups, w.Resource.Group) &&
		(equivalent || exactOrWildcard(r.APIVersions, w.Resource.Version)) &&
		slices.ContainsFunc(r.Resources, func(rs string) bool {
			res, sub, _ := strings.Cut(rs, "/")
			return (res == "*" || res == w.Resource.Resource) && (sub == "*" || sub == w.Subresource)
		})
}

// scopeMatches: a rule's scope is "*" (the default), Namespaced or
// Cluster; a namespace is cluster-scoped.
func scopeMatches(scope *admissionregistrationv1.ScopeType, w Write) bool {
	if scope == nil || *scope == admissionregistrationv1.AllScopes {
		return true
	}
	return (*scope == admissionregistrationv1.NamespacedScope) == w.Namespaced
}

func exactOrWildcard(items []string, s string) bool {
	return slices.Contains(items, "*") || slices.Contains(items, s)
}

// narrowed names what selects only some of w's objects: a selector that
// is set and not empty (a namespaceSelector selects every cluster-scoped
// object), match conditions, resource names.
func narrowed(w Write, namespaces, objects *metav1.LabelSelector, conditions int, names bool) []string {
	var n []string
	if w.Namespaced && selects(namespaces) {
		n = append(n, "namespaceSelector")
	}
	if selects(objects) {
		n = append(n, "objectSelector")
	}
	if conditions > 0 {
		n = append(n, "matchConditions")
	}
	if names {
		n = append(n, "resourceNames")
	}
	return n
}

func selects(s *metav1.LabelSelector) bool {
	return s != nil && (len(s.MatchLabels) > 0 || len(s.MatchExpressions) > 0)
}

func namedRules(rules []admissionregistrationv1.NamedRuleWithOperations) bool {
	return slices.ContainsFunc(rules, func(r admissionregistrationv1.NamedRuleWithOperations) bool { return len(r.ResourceNames) > 0 })
}
