// Package security_test runs svm with nothing but the RBAC it ships: the
// controller as its ServiceAccount bound to the rendered config/default
// roles, and the CLI with the roles of config/rbac/cli. It shows that those
// roles are enough, that svm fails at once and readably without them, and
// that no object contents ever reach svm's output or the cluster's Events.
package security_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/framework"
)

// svm's install namespace and the controller's ServiceAccount, as
// config/default renders them. The tests run `svm controller` as its
// Deployment does: framework.ControllerArgs with --leader-elect and the
// lease in installNamespace (the last --leader-election-namespace wins).
const (
	installNamespace = "svm-system"
	controllerSA     = "svm-controller"
)

var controllerUser = framework.ServiceAccountUser(installNamespace, controllerSA)

// install applies config/default for real, as an operator would, and waits
// until svm's CRDs are served. Its Deployment never gets pods (no
// kube-controller-manager runs here); the tests run svm themselves.
func install(t *testing.T, env *framework.Env) []*unstructured.Unstructured {
	t.Helper()
	rendered := env.RenderManifests(t, "config/default")
	env.ApplyManifests(t, rendered)
	env.WaitEstablished(t, "storageversionmigrations."+migrationv1alpha1.GroupVersion.Group)
	env.WaitEstablished(t, "storagestates."+migrationv1alpha1.GroupVersion.Group)
	return decode(t, rendered)
}

// decode splits rendered manifests into objects.
func decode(t *testing.T, rendered []byte) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(rendered), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("decode rendered manifests: %v", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// clusterRole returns the rendered ClusterRole name.
func clusterRole(t *testing.T, objs []*unstructured.Unstructured, name string) *rbacv1.ClusterRole {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" && o.GetName() == name {
			r := &rbacv1.ClusterRole{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, r); err != nil {
				t.Fatal(err)
			}
			return r
		}
	}
	t.Fatalf("the rendered manifests have no ClusterRole %s", name)
	return nil
}

// createServiceAccount creates a ServiceAccount in the install namespace.
func createServiceAccount(t *testing.T, env *framework.Env, name string) {
	t.Helper()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: installNamespace}}
	if err := env.Client.Create(framework.Context(t, time.Minute), sa); err != nil {
		t.Fatalf("create service account %s: %v", name, err)
	}
}

// bind binds the ClusterRole role to the ServiceAccount sa of the install
// namespace, as an operator would with `kubectl create clusterrolebinding`.
func bind(t *testing.T, env *framework.Env, role, sa string) {
	t.Helper()
	b := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: sa + "-" + role},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: installNamespace}},
	}
	if err := env.Client.Create(framework.Context(t, time.Minute), b); err != nil {
		t.Fatalf("bind %s to %s: %v", role, sa, err)
	}
}

// deleteObject deletes obj and fails the test unless it existed.
func deleteObject(t *testing.T, env *framework.Env, obj client.Object) {
	t.Helper()
	if err := env.Client.Delete(framework.Context(t, time.Minute), obj); err != nil {
		t.Fatalf("delete %T %s: %v", obj, obj.GetName(), err)
	}
}

// exitWithin waits up to timeout for p to exit and returns its exit code,
// or fails the test.
func exitWithin(t *testing.T, p *framework.Process, timeout time.Duration) int {
	t.Helper()
	code := make(chan int, 1)
	go func() { code <- p.ExitCode() }()
	select {
	case c := <-code:
		return c
	case <-time.After(timeout):
		t.Fatalf("svm still runs after %s; log:\n%s", timeout, p.Log(t))
		return 0
	}
}

// lines splits output into its non-empty lines.
func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}

// refused lists, as "verb resource", the requests in reqs that the API
// server refused as unauthenticated or forbidden.
func refused(reqs []framework.AuditEvent) []string {
	var out []string
	for _, r := range reqs {
		if r.Code() == 401 || r.Code() == 403 {
			out = append(out, r.Verb+" "+r.Resource())
		}
	}
	return out
}

func ctx(t *testing.T) context.Context { return framework.Context(t, time.Minute) }
