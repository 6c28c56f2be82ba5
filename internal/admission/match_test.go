package admission

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
)

func rule(group, version, resource string, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{
		Operations: ops,
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{group}, APIVersions: []string{version}, Resources: []string{resource}},
	}
}

func webhooks(name string, hooks ...admissionregistrationv1.ValidatingWebhook) admissionregistrationv1.ValidatingWebhookConfiguration {
	return admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: name}, Webhooks: hooks}
}

func TestMatching(t *testing.T) {
	deployments := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	update, create, all := admissionregistrationv1.Update, admissionregistrationv1.Create, admissionregistrationv1.OperationAll
	exact := ptr.To(admissionregistrationv1.Exact)
	checks := Checks{
		Validating: []admissionregistrationv1.ValidatingWebhookConfiguration{
			webhooks("deploy-guard",
				admissionregistrationv1.ValidatingWebhook{Name: "updates.example.com", Rules: []admissionregistrationv1.RuleWithOperations{rule("apps", "v1", "deployments", update)}},
				admissionregistrationv1.ValidatingWebhook{Name: "creates.example.com", Rules: []admissionregistrationv1.RuleWithOperations{rule("apps", "v1", "deployments", create)}},
				// Equivalent (the default): another version of the same
				// resource is asked too.
				admissionregistrationv1.ValidatingWebhook{Name: "beta.example.com", Rules: []admissionregistrationv1.RuleWithOperations{rule("apps", "v1beta1", "deployments", update)}},
				// Exact: only the versions named.
				admissionregistrationv1.ValidatingWebhook{Name: "exact.example.com", MatchPolicy: exact, Rules: []admissionregistrationv1.RuleWithOperations{rule("apps", "v1beta1", "deployments", update)}},
			),
			webhooks("everything",
				admissionregistrationv1.ValidatingWebhook{Name: "all-sub.example.com", Rules: []admissionregistrationv1.RuleWithOperations{rule("*", "*", "*/*", all)},
					NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}},
				admissionregistrationv1.ValidatingWebhook{Name: "cluster.example.com", Rules: []admissionregistrationv1.RuleWithOperations{func() admissionregistrationv1.RuleWithOperations {
					r := rule("*", "*", "*", all)
					r.Scope = ptr.To(admissionregistrationv1.ClusterScope)
					return r
				}()}},
				admissionregistrationv1.ValidatingWebhook{Name: "status.example.com", Rules: []admissionregistrationv1.RuleWithOperations{rule("apps", "*", "deployments/status", update)},
					ObjectSelector: &metav1.LabelSelector{}, MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "c", Expression: "true"}}},
			),
		},
		Mutating: []admissionregistrationv1.MutatingWebhookConfiguration{{
			ObjectMeta: metav1.ObjectMeta{Name: "defaults"},
			Webhooks:   []admissionregistrationv1.MutatingWebhook{{Name: "defaults.example.com", Rules: []admissionregistrationv1.RuleWithOperations{rule("apps", "v1", "*", update)}}},
		}},
		Policies: []admissionregistrationv1.ValidatingAdmissionPolicy{
			{ObjectMeta: metav1.ObjectMeta{Name: "frozen"}, Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{
					{RuleWithOperations: rule("apps", "v1", "deployments", update, create)},
				}},
			}},
			{ObjectMeta: metav1.ObjectMeta{Name: "excluded"}, Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				MatchConstraints: &admissionregistrationv1.MatchResources{
					ResourceRules:        []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: rule("*", "*", "*", all)}},
					ExcludeResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: rule("apps", "*", "deployments", all)}},
				},
			}},
		},
		Bindings: []admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			{ObjectMeta: metav1.ObjectMeta{Name: "frozen-deny"}, Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName: "frozen", ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}},
			// Warn and Audit refuse nothing.
			{ObjectMeta: metav1.ObjectMeta{Name: "frozen-warn"}, Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName: "frozen", ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Warn}}},
			// Narrowed by the binding to names.
			{ObjectMeta: metav1.ObjectMeta{Name: "frozen-named"}, Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName: "frozen", ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
				MatchResources: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{
					{ResourceNames: []string{"web"}, RuleWithOperations: rule("apps", "v1", "deployments", update)},
				}}}},
			// Its binding's rules leave deployments out.
			{ObjectMeta: metav1.ObjectMeta{Name: "frozen-secrets"}, Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName: "frozen", ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
				MatchResources: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{
					{RuleWithOperations: rule("", "v1", "secrets", update)},
				}}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "excluded-deny"}, Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName: "excluded", ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}},
		},
	}
	for _, tc := range []struct {
		name  string
		write Write
		want  []string
	}{
		{
			name:  "deployments",
			write: Write{Resource: deployments, Namespaced: true},
			want: []string{
				"admission webhook updates.example.com (configuration deploy-guard)",
				"admission webhook beta.example.com (configuration deploy-guard)",
				"admission webhook all-sub.example.com (configuration everything), for the objects its namespaceSelector select",
				"mutating admission webhook defaults.example.com (configuration defaults)",
				"ValidatingAdmissionPolicy frozen (binding frozen-deny)",
				"ValidatingAdmissionPolicy frozen (binding frozen-named), for the objects its resourceNames select",
			},
		},
		{
			name:  "deployments/status",
			write: Write{Resource: deployments, Subresource: "status", Namespaced: true},
			want: []string{
				"admission webhook all-sub.example.com (configuration everything), for the objects its namespaceSelector select",
				"admission webhook status.example.com (configuration everything), for the objects its matchConditions select",
			},
		},
		{
			name:  "a cluster-scoped resource",
			write: Write{Resource: schema.GroupVersionResource{Group: "example.com", Version: "v2", Resource: "gizmos"}},
			want: []string{
				// A namespaceSelector selects every cluster-scoped object.
				"admission webhook all-sub.example.com (configuration everything)",
				"admission webhook cluster.example.com (configuration everything)",
				"ValidatingAdmissionPolicy excluded (binding excluded-deny)",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, c := range checks.Matching(tc.write) {
				got = append(got, c.String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("checks matching (-want +got):\n%s", diff)
			}
		})
	}
}
