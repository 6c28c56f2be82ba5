package admission_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestAPolicyRefusesDeployments: a ValidatingAdmissionPolicy (CEL) refuses
// every update of the Deployments labelled frozen in one namespace, half of
// them. svm migrate deployments.apps fails, naming the policy and its
// binding and the objects it refused; with --through-status it writes
// those through the Deployments' status subresource, which the policy does
// not cover, and every Deployment stays as it was. The policy's own
// refusals show it was in force throughout.
func TestAPolicyRefusesDeployments(t *testing.T) {
	t.Parallel()
	const n = 40
	env := framework.Shared(t, controlplane.Options{})
	ctx := framework.Context(t, 3*time.Minute)
	ns := framework.TestName(t)
	env.CreateNamespace(t, ns)
	deployments := env.Kube.AppsV1().Deployments(ns)
	for i := range n {
		labels := map[string]string{"app": "web"}
		if i%2 == 0 {
			labels["frozen"] = "true"
		}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%02d", i), Labels: labels},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.invalid/web:1"}}},
				},
			},
		}
		if _, err := deployments.Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create deployment: %v", err)
		}
	}
	gvr := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	before := env.TakeSnapshot(t, gvr)
	policy := startFreezingPolicy(t, env, ns, deployments)

	t.Run("--dry-run", func(t *testing.T) {
		code, stdout, stderr := svm(t, "migrate", "--kubeconfig", env.KubeconfigFile(t), "--dry-run", "deployments.apps")
		if code != 0 {
			t.Fatalf("svm migrate --dry-run exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		for _, want := range []string{
			fmt.Sprintf("  ValidatingAdmissionPolicy %s (binding %s)", policy, policy),
			"  through the status subresource (--through-status): no admission webhook or policy is asked\n",
		} {
			if !strings.Contains(stdout, want) {
				t.Errorf("svm migrate --dry-run does not say %q:\n%s", want, stdout)
			}
		}
		env.ExpectUnchanged(t, gvr, before)
	})

	t.Run("without --through-status", func(t *testing.T) {
		code, stdout, stderr := svm(t, "migrate", "--kubeconfig", env.KubeconfigFile(t), "deployments.apps")
		if code == 0 {
			t.Fatalf("svm migrate exited 0 though the policy refused %d deployments\nstdout:\n%s", n/2, stdout)
		}
		want := fmt.Sprintf("ValidatingAdmissionPolicy %s (binding %s) refused %d objects: ", policy, policy, n/2)
		if !strings.Contains(stdout, want) || strings.Contains(stdout, "status subresource") {
			t.Errorf("the summary lacks %q, or claims writes through status:\nstdout:\n%s\nstderr:\n%s", want, stdout, stderr)
		}
	})

	t.Run("with --through-status", func(t *testing.T) {
		code, stdout, stderr := svm(t, "migrate", "--kubeconfig", env.KubeconfigFile(t), "--through-status", "deployments.apps")
		if code != 0 {
			t.Fatalf("svm migrate --through-status exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		if want := fmt.Sprintf("written through the status subresource after an admission denial %d in ", n/2); !strings.Contains(stdout, want) {
			t.Errorf("the summary lacks %q:\n%s", want, stdout)
		}
		if strings.Contains(stdout, "refused") {
			t.Errorf("the summary names refusals that were written through status:\n%s", stdout)
		}
	})
	env.ExpectUnchanged(t, gvr, before)
	// Still in force: an update of a frozen Deployment is refused.
	_, err := deployments.Patch(ctx, "web-00", types.MergePatchType, []byte(`{"metadata":{"annotations":{"probe":"after"}}}`), metav1.PatchOptions{})
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Errorf("an update of a frozen Deployment after the migration: %v, want the policy's refusal", err)
	}
}

// startFreezingPolicy creates a ValidatingAdmissionPolicy, and its binding
// of the same name, that refuses every UPDATE of the Deployments labelled
// frozen in namespace, waits until the API server enforces it, and
// returns its name.
func startFreezingPolicy(t *testing.T, env *framework.Env, namespace string, deployments interface {
	Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (*appsv1.Deployment, error)
}) string {
	t.Helper()
	ctx := framework.Context(t, 2*time.Minute)
	name := namespace + ".frozen.example.com"
	fail := admissionregistrationv1.Fail
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{"apps"}, APIVersions: []string{"v1"}, Resources: []string{"deployments"}},
				}}},
			},
			Validations: []admissionregistrationv1.Validation{{
				Expression: `!has(object.metadata.labels) || !('frozen' in object.metadata.labels)`,
				Message:    "frozen deployments are not to be changed",
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: namespace},
			}},
		},
	}
	if err := env.Client.Create(ctx, policy); err != nil {
		t.Fatalf("create the policy: %v", err)
	}
	if err := env.Client.Create(ctx, binding); err != nil {
		t.Fatalf("create the binding: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = env.Client.Delete(ctx, binding)
		_ = env.Client.Delete(ctx, policy)
	})
	// The API server enforces a new policy a moment later: probe a frozen
	// Deployment with a change that is taken back until one is refused.
	framework.Eventually(t, "the policy to be enforced", time.Minute, func(ctx context.Context) (bool, error) {
		_, err := deployments.Patch(ctx, "web-00", types.MergePatchType, []byte(`{"metadata":{"annotations":{"probe":null}}}`), metav1.PatchOptions{})
		return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+name+"'"), nil
	})
	return name
}
