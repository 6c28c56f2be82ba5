package admission_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestAWebhookRefusesSecrets: Secrets have no status subresource, so a
// webhook that refuses their updates leaves them unmigrated whatever svm
// is asked: svm migrate secrets, with --through-status too, fails naming
// the webhook and the Secrets it refused, claims no write through status,
// and etcd still holds every refused Secret as it was (the same mod
// revision).
func TestAWebhookRefusesSecrets(t *testing.T) {
	t.Parallel()
	const n = 10
	env := framework.Shared(t, controlplane.Options{})
	ctx := framework.Context(t, 2*time.Minute)
	ns := framework.TestName(t)
	env.CreateNamespace(t, ns)
	for i := range n {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("s-%02d", i)}, StringData: map[string]string{"k": "v"}}
		if _, err := env.Kube.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	secrets := framework.Resource{Plural: "secrets", Kind: "Secret"}
	probe := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "probe"}}}
	framework.StartAdmissionWebhook(t, env, framework.AdmissionHook{
		Resource: secrets, Namespace: ns, Probe: probe,
		Review: func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			return &admissionv1.AdmissionResponse{Result: &metav1.Status{Code: http.StatusForbidden, Message: "secrets here are sealed"}}
		},
	})
	prefix := "/registry/secrets/" + ns + "/"
	before := env.ModRevisions(t, prefix)

	code, stdout, stderr := svm(t, "migrate", "--kubeconfig", env.KubeconfigFile(t), "--dry-run", "secrets")
	if code != 0 {
		t.Fatalf("svm migrate --dry-run exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{
		"  admission webhook validate.example.com (configuration test-secrets-" + ns + "), for the objects its namespaceSelector select\n",
		"  secrets has no status subresource: --through-status cannot write past them\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("svm migrate --dry-run does not say %q:\n%s", want, stdout)
		}
	}

	for _, args := range [][]string{{"secrets"}, {"--through-status", "secrets"}} {
		code, stdout, stderr := svm(t, append([]string{"migrate", "--kubeconfig", env.KubeconfigFile(t)}, args...)...)
		if code == 0 {
			t.Fatalf("svm migrate %v exited 0 though the webhook refused %d Secrets\nstdout:\n%s", args, n, stdout)
		}
		if want := fmt.Sprintf("admission webhook validate.example.com refused %d objects: ", n); !strings.Contains(stdout, want) {
			t.Errorf("svm migrate %v: the summary lacks %q:\nstdout:\n%s\nstderr:\n%s", args, want, stdout, stderr)
		}
		if strings.Contains(stdout, "status subresource") {
			t.Errorf("svm migrate %v claims writes through a status subresource Secrets do not have:\n%s", args, stdout)
		}
	}
	after := env.ModRevisions(t, prefix)
	if len(before) != n || fmt.Sprint(before) != fmt.Sprint(after) {
		t.Errorf("etcd mod revisions of the refused Secrets moved: before %v, after %v", before, after)
	}
}
