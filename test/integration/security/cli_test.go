package security_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestCLIRoles checks the ClusterRoles of config/rbac/cli: they are not
// part of config/default and nothing binds them; svm-viewer is read-only
// and lets `svm status` and `svm check-upgrade` work, svm-migrator lets `svm migrate` work,
// svm-retirer lets `svm retire` work; and
// without the role it needs, each command fails with one readable line.
func TestCLIRoles(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{})
	defaults := install(t, env)
	rendered := env.RenderManifests(t, "config/rbac/cli")
	cliObjs := decode(t, rendered)

	var names []string
	for _, o := range cliObjs {
		if o.GetKind() != "ClusterRole" {
			t.Errorf("config/rbac/cli renders a %s %s; it must grant nothing by itself", o.GetKind(), o.GetName())
		}
		names = append(names, o.GetName())
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"svm-migrator", "svm-retirer", "svm-status-writer", "svm-viewer"}) {
		t.Errorf("config/rbac/cli renders %v, want svm-migrator, svm-retirer, svm-status-writer and svm-viewer", names)
	}
	for _, o := range defaults {
		if slices.Contains(names, o.GetName()) {
			t.Errorf("config/default installs %s %s: the CLI roles must be installed and bound deliberately", o.GetKind(), o.GetName())
		}
	}
	for _, rule := range clusterRole(t, cliObjs, "svm-viewer").Rules {
		if slices.ContainsFunc(rule.Verbs, func(v string) bool { return !slices.Contains([]string{"get", "list", "watch"}, v) }) ||
			slices.Contains(rule.Resources, "*") || slices.Contains(rule.APIGroups, "*") {
			t.Errorf("svm-viewer grants more than reading: %+v", rule)
		}
	}
	for _, rule := range clusterRole(t, cliObjs, "svm-migrator").Rules {
		if !slices.Equal(slices.Sorted(slices.Values(rule.Verbs)), []string{"list", "patch", "watch"}) {
			t.Errorf("svm-migrator grants more than list, watch and patch: %+v", rule)
		}
	}
	// svm-status-writer patches status subresources, nothing else: the
	// writes through status that --through-status asks for.
	for _, rule := range clusterRole(t, cliObjs, "svm-status-writer").Rules {
		if !slices.Equal(rule.Verbs, []string{"patch"}) || !slices.Equal(rule.Resources, []string{"*/status"}) {
			t.Errorf("svm-status-writer grants more than patch on status subresources: %+v", rule)
		}
	}
	for _, rule := range clusterRole(t, cliObjs, "svm-retirer").Rules {
		if slices.Contains(rule.Verbs, "*") || slices.ContainsFunc(rule.Verbs, func(v string) bool {
			return v == "create" || v == "delete" || v == "deletecollection"
		}) {
			t.Errorf("svm-retirer grants more than reading, patching and updating: %+v", rule)
		}
		// Update on every resource rewrites objects as listed, as
		// svm-migrator's does; anything else it may update is a CRD.
		wildcard := slices.Equal(rule.APIGroups, []string{"*"}) && slices.Equal(rule.Resources, []string{"*"})
		if wildcard && !slices.Equal(slices.Sorted(slices.Values(rule.Verbs)), []string{"get", "list", "patch", "update", "watch"}) {
			t.Errorf("svm-retirer grants more on every resource than get, list, watch, update and patch: %+v", rule)
		}
		if !wildcard && slices.Contains(rule.Verbs, "update") && !slices.Equal(rule.APIGroups, []string{"apiextensions.k8s.io"}) {
			t.Errorf("svm-retirer may update more than objects and CRDs: %+v", rule)
		}
	}
	env.ApplyManifests(t, rendered)

	// Something to show and something to migrate: a migration, and
	// widgets stored in v1 after the storage moved to v2.
	env.CreateWidgetCRD(t, "v1")
	const n = 100
	before := env.StoredInOldVersion(t, framework.WidgetResource, []string{"ns-a", "ns-b"}, n)
	env.CreateMigration(t, "widgets-by-hand", framework.Widgets)

	for _, sa := range []string{"viewer", "migrator", "retirer", "nobody"} {
		createServiceAccount(t, env, sa)
	}
	bind(t, env, "svm-viewer", "viewer")
	bind(t, env, "svm-migrator", "migrator")
	bind(t, env, "svm-retirer", "retirer")
	viewer := env.ServiceAccountKubeconfig(t, installNamespace, "viewer")
	migrator := env.ServiceAccountKubeconfig(t, installNamespace, "migrator")
	retirer := env.ServiceAccountKubeconfig(t, installNamespace, "retirer")
	nobody := env.ServiceAccountKubeconfig(t, installNamespace, "nobody")

	t.Run("status with svm-viewer", func(t *testing.T) {
		code, stdout, stderr := framework.RunSVM(t, viewer, time.Minute, "status")
		if code != 0 || stderr != "" || !strings.Contains(stdout, "widgets-by-hand") {
			t.Errorf("svm status as svm-viewer: exit %d, want 0 with the migration and nothing on stderr\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
	})
	t.Run("check-upgrade with svm-viewer", func(t *testing.T) {
		// The widgets are still stored in v1 and the CRD says so: a
		// target that decodes only v2 is unsafe (exit 3), a verdict the
		// viewer's reads were enough to reach.
		code, stdout, stderr := framework.RunSVM(t, viewer, time.Minute, "check-upgrade", "--decodable", "widgets.example.com=v2")
		if code != 3 || stderr != "" || !strings.Contains(stdout, "widgets.example.com") || !strings.Contains(stdout, "unsafe") {
			t.Errorf("svm check-upgrade as svm-viewer: exit %d, want 3 (unsafe) and nothing on stderr\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
	})
	// (svm-migrator may list everything, svm's objects included, so
	// `svm status` works with it too.)
	t.Run("status with no role", func(t *testing.T) {
		code, stdout, stderr := framework.RunSVM(t, nobody, time.Minute, "status")
		if code == 0 || stdout != "" || !framework.OneLine(stderr) || !refusal(stderr, "nobody", "storageversionmigrations") {
			t.Errorf("svm status without svm-viewer: exit %d, want a failure in one line naming the refusal\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		t.Logf("stderr: %s", strings.TrimSpace(stderr))
	})
	for _, tc := range []struct{ name, kubeconfig, user string }{
		{"migrate with svm-viewer only", viewer, "viewer"},
		{"migrate with no role", nobody, "nobody"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := framework.RunSVM(t, tc.kubeconfig, time.Minute, "migrate", "widgets.example.com")
			// One line says why; the last one only how many resources
			// were not migrated, as after any failure.
			errLines := lines(stderr)
			if code == 0 || len(errLines) != 2 || !refusal(errLines[0], tc.user, "widgets") ||
				errLines[1] != "svm: 1 of 1 resources were not fully migrated: widgets.example.com (failed: Forbidden)" {
				t.Errorf("svm migrate as %s: exit %d, want a failure with one line naming the refusal\nstdout:\n%s\nstderr:\n%s", tc.user, code, stdout, stderr)
			}
			t.Logf("stderr: %s", strings.TrimSpace(errLines[0]))
		})
	}
	env.ExpectStored(t, framework.EtcdPrefix(framework.Widgets.GroupResource()), map[string]int{"example.com/v1": n})

	t.Run("migrate with svm-migrator", func(t *testing.T) {
		writes := env.ServerWrites(t, "widgets")
		code, stdout, stderr := framework.RunSVM(t, migrator, 2*time.Minute, "migrate", "widgets.example.com")
		if code != 0 || stderr != "" {
			t.Fatalf("svm migrate as svm-migrator: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		env.ExpectStored(t, framework.EtcdPrefix(framework.Widgets.GroupResource()), map[string]int{"example.com/v2": n})
		env.ExpectUnchanged(t, framework.Widgets, before)
		framework.Scenario{
			Name: "svm migrate as svm-migrator", Objects: n,
			Writes: env.ServerWrites(t, "widgets") - writes, Retries: -1, Verified: !t.Failed(),
		}.Report(t)
	})

	t.Run("retire with svm-migrator only", func(t *testing.T) {
		code, stdout, stderr := framework.RunSVM(t, migrator, time.Minute, "retire", "widgets.v1.example.com", "--crd-drain-margin", framework.TestDrainMargin.String())
		if code == 0 || !refusal(stdout+stderr, "migrator", "customresourcedefinitions") {
			t.Errorf("svm retire as svm-migrator: exit %d, want a refusal naming customresourcedefinitions\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
	})
	t.Run("retire with svm-retirer", func(t *testing.T) {
		code, stdout, stderr := framework.RunSVM(t, retirer, 2*time.Minute, "retire", "widgets.v1.example.com", "--crd-drain-margin", framework.TestDrainMargin.String())
		if code != 0 || stderr != "" || !strings.Contains(stdout, "storedVersions: pruned to [v2]") {
			t.Fatalf("svm retire as svm-retirer: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		if got := env.CRDStoredVersions(t, framework.WidgetsCRDName); !slices.Equal(got, []string{"v2"}) {
			t.Errorf("storedVersions %v after svm retire, want [v2]", got)
		}
		env.ExpectStored(t, framework.EtcdPrefix(framework.Widgets.GroupResource()), map[string]int{"example.com/v2": n})
		for _, o := range env.List(t, framework.Widgets) {
			for _, e := range o.GetManagedFields() {
				if e.APIVersion != "example.com/v2" {
					t.Errorf("%s/%s: entry of %s still names %s", o.GetNamespace(), o.GetName(), e.Manager, e.APIVersion)
				}
			}
		}
	})

	// Bindings are what grant the roles: none of the CLI roles is bound
	// to anyone but the test's own ServiceAccounts.
	bindings, err := env.Kube.RbacV1().ClusterRoleBindings().List(ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bindings.Items {
		if slices.Contains(names, b.RoleRef.Name) && !slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool {
			return s.Namespace == installNamespace && slices.Contains([]string{"viewer", "migrator", "retirer"}, s.Name)
		}) {
			t.Errorf("ClusterRoleBinding %s grants %s to %v", b.Name, b.RoleRef.Name, b.Subjects)
		}
	}
}

// refusal reports whether msg is the API server's refusal of user on
// resource, in words a person can act on.
func refusal(msg, user, resource string) bool {
	return strings.Contains(msg, "forbidden") && strings.Contains(msg, framework.ServiceAccountUser(installNamespace, user)) &&
		strings.Contains(msg, `resource "`+resource+`"`)
}
