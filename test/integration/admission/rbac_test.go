package admission_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestThroughStatusNeedsTheStatusWriterRole: an identity whose RBAC names
// the resource alone (list, watch, patch on widgets) cannot write through
// the status subresource. svm migrate --through-status then stops with
// StatusWriteForbidden, says which role grants it, and claims no write
// through status. Once the shipped svm-status-writer ClusterRole
// (config/rbac/cli) is bound too, the same command stores every object in
// the new version.
func TestThroughStatusNeedsTheStatusWriterRole(t *testing.T) {
	t.Parallel()
	const n = 40
	env := framework.Shared(t, controlplane.Options{})
	ctx := framework.Context(t, 2*time.Minute)
	r := env.NewResourceWithStatus(t)
	ns := framework.TestName(t)
	before := env.StoredInOldVersion(t, r, []string{ns}, n)
	deny := map[string]bool{}
	for key := range before {
		if len(deny) < n/2 {
			deny[key] = true
		}
	}
	hook := framework.StartDenyingWebhook(t, env, r, deny)

	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "migrator"}}
	narrow := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-widgets-migrator"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{r.Group}, Resources: []string{r.Plural}, Verbs: []string{"list", "watch", "patch"}}},
	}
	for _, obj := range []client.Object{sa, narrow, binding(ns+"-widgets-migrator", narrow.Name, sa)} {
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatalf("create %T: %v", obj, err)
		}
	}
	kubeconfig := env.ServiceAccountKubeconfig(t, ns, sa.Name)

	code, stdout, stderr := svm(t, "migrate", "--kubeconfig", kubeconfig, "--through-status", r.CRDName())
	if code == 0 {
		t.Fatalf("svm migrate --through-status exited 0 without leave to patch widgets/status\nstdout:\n%s", stdout)
	}
	if want := r.CRDName() + ": failed: StatusWriteForbidden: "; !strings.Contains(stdout, want) {
		t.Errorf("the summary lacks %q:\n%s", want, stdout)
	}
	if !strings.Contains(stderr, "svm-status-writer") || !strings.Contains(stderr, "cannot patch resource \"widgets/status\"") {
		t.Errorf("the error does not say which RBAC is missing and which role grants it:\n%s", stderr)
	}
	if strings.Contains(stdout, "written through the status subresource") {
		t.Errorf("the summary claims writes through status that RBAC refused:\n%s", stdout)
	}
	if stored := env.StoredVersions(t, r.EtcdPrefix()); stored[r.Group+"/v1"] == 0 {
		t.Errorf("etcd holds %v: the refused objects cannot have left v1", stored)
	}

	// The shipped role, as an operator binds it.
	var writer rbacv1.ClusterRole
	if err := yaml.Unmarshal(framework.MustReadFile(t, framework.RepoRoot()+"/config/rbac/cli/status_writer_role.yaml"), &writer); err != nil {
		t.Fatal(err)
	}
	writer.Name = ns + "-" + writer.Name
	if err := env.Client.Create(ctx, &writer); err != nil {
		t.Fatalf("create the status-writer role: %v", err)
	}
	if err := env.Client.Create(ctx, binding(ns+"-status-writer", writer.Name, sa)); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, "the status-writer role to take effect", time.Minute, func(context.Context) (bool, error) {
		code, stdout, stderr = svm(t, "migrate", "--kubeconfig", kubeconfig, "--through-status", r.CRDName())
		return code == 0, nil
	})
	if want := fmt.Sprintf("written through the status subresource after an admission denial %d in ", n/2); !strings.Contains(stdout, want) {
		t.Errorf("the summary lacks %q:\nstdout:\n%s\nstderr:\n%s", want, stdout, stderr)
	}
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": n})
	env.ExpectUnchanged(t, r.GVR("v1"), before)
	if got := hook.TotalSubresourceCalls(); got != 0 {
		t.Errorf("the webhook was asked about %d writes through the status subresource, want none", got)
	}
}

func binding(name, role string, sa *corev1.ServiceAccount) *rbacv1.ClusterRoleBinding {
	return &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: sa.Namespace, Name: sa.Name}},
	}
}
