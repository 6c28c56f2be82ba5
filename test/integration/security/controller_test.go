package security_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestControllerUnderShippedRoles runs `svm controller`, trigger on, as the
// ServiceAccount of config/default with exactly the RBAC config/default
// binds to it. The trigger creates a StorageState and a migration for
// every resource; the widgets, whose CRD moved its storage from v1 to v2,
// end stored as v2 with their contents unchanged, the CRD's storedVersions
// is pruned, every migration succeeds, and the API server refused none of
// the controller's requests.
func TestControllerUnderShippedRoles(t *testing.T) {
	t.Parallel()
	audit := framework.NewAuditLog(t, t.TempDir())
	env := framework.Start(t, controlplane.Options{APIServerFlags: audit.Flags})
	install(t, env)
	env.CreateWidgetCRD(t, "v1")
	const n = 300
	before := env.StoredInOldVersion(t, framework.WidgetResource, []string{"ns-a", "ns-b"}, n)
	hashV2 := resources.StorageVersionHash(framework.Widgets.Group, "v2", "Widget")

	kubeconfig := env.ServiceAccountKubeconfig(t, installNamespace, controllerSA)
	svm := framework.StartSVMWithKubeconfig(t, kubeconfig, framework.ControllerArgs("--leader-elect", "--leader-election-namespace", installNamespace, "--trigger-interval", "2s", "--max-parallel", "4")...)

	env.WaitStorageState(t, framework.Widgets.GroupResource(), 3*time.Minute, "settled on ["+hashV2+"]", func(s *migrationv1alpha1.StorageState) bool {
		return cmp.Equal([]string{hashV2}, s.Status.PersistedStorageVersionHashes)
	})
	crd := &apiextensionsv1.CustomResourceDefinition{}
	pruned := framework.WaitFor(t.Context(), time.Minute, func() bool {
		return env.Client.Get(t.Context(), client.ObjectKey{Name: framework.WidgetsCRDName}, crd) == nil &&
			slices.Equal(crd.Status.StoredVersions, []string{"v2"})
	})
	if !pruned {
		t.Errorf("storedVersions of %s stayed %v, want [v2]", framework.WidgetsCRDName, crd.Status.StoredVersions)
	}
	env.ExpectStored(t, framework.EtcdPrefix(framework.Widgets.GroupResource()), map[string]int{"example.com/v2": n})
	env.ExpectUnchanged(t, framework.Widgets, before)

	// Every resource the trigger found was migrated under these roles.
	var list migrationv1alpha1.StorageVersionMigrationList
	allDone := framework.WaitFor(t.Context(), 3*time.Minute, func() bool {
		if err := env.Client.List(t.Context(), &list); err != nil || len(list.Items) == 0 {
			return false
		}
		return !slices.ContainsFunc(list.Items, func(m migrationv1alpha1.StorageVersionMigration) bool { return !m.IsFinished() })
	})
	if !allDone {
		t.Errorf("not every migration finished")
	}
	for i := range list.Items {
		if m := &list.Items[i]; framework.Failed(m) {
			c := framework.Condition(m, migrationv1alpha1.MigrationFailed)
			t.Errorf("migration %s failed: %s: %s", m.Name, c.Reason, c.Message)
		}
	}

	// The controller holds its lease, in its namespace, under these roles.
	lease := &coordinationv1.Lease{}
	if err := env.Client.Get(ctx(t), client.ObjectKey{Namespace: installNamespace, Name: "svm-controller.migration.k8s.io"}, lease); err != nil {
		t.Errorf("the leader election lease: %v", err)
	} else if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Errorf("the leader election lease has no holder: %+v", lease.Spec)
	}

	// What the roles grant was enough: nothing was refused, in the audit
	// log or in svm's own words.
	reqs := audit.Requests(t, controllerUser)
	if len(reqs) == 0 {
		t.Fatal("the audit log has no request of the controller's ServiceAccount; the test proves nothing")
	}
	if r := refused(reqs); len(r) > 0 {
		t.Errorf("the API server refused %d requests of the controller: %v", len(r), r)
	}
	if log := string(svm.Log(t)); strings.Contains(strings.ToLower(log), "forbidden") {
		t.Errorf("svm logged a refusal:\n%s", log)
	}
	t.Logf("requests besides the rewrites: %s", ownRequests(reqs))
	framework.Scenario{
		Name: "controller as its ServiceAccount", Objects: n,
		Writes: env.ServerWrites(t, "widgets"), Retries: -1, Verified: !t.Failed(),
	}.Report(t)
}

// ownRequests summarises, as "verb resource=count", what the controller
// did besides rewriting (the lists, watches and patches every migration
// sends):
// the requests that need svm's rules other than the wildcard.
func ownRequests(reqs []framework.AuditEvent) string {
	counts := map[string]int{}
	for _, r := range reqs {
		if r.ObjectRef != nil && (!slices.Contains([]string{"list", "watch", "update", "patch"}, r.Verb) || r.ObjectRef.Subresource != "") {
			counts[r.Verb+" "+r.Resource()]++
		}
	}
	out := make([]string, 0, len(counts))
	for k, n := range counts {
		out = append(out, fmt.Sprintf("%s=%d", k, n))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// TestControllerWithoutItsRoles takes the shipped roles away one at a time
// and shows that svm says so at once, in one line, and stops asking:
//   - without the ClusterRoleBinding, `svm controller` exits non-zero
//     before it starts, naming the refusal and the role it needs;
//   - without the leader election RoleBinding, likewise;
//   - with svm's own objects allowed but not the resources it migrates (a
//     ClusterRole narrowed by hand), a migration ends Failed with reason
//     Forbidden after a single refused list, and the controller goes on.
func TestControllerWithoutItsRoles(t *testing.T) {
	t.Parallel()
	audit := framework.NewAuditLog(t, t.TempDir())
	env := framework.Start(t, controlplane.Options{APIServerFlags: audit.Flags})
	objs := install(t, env)
	env.CreateWidgetCRD(t, "v1")
	const n = 50
	env.CreateWidgets(t, "v1", []string{"default"}, n)
	env.CreateMigration(t, "widgets", framework.Widgets)
	kubeconfig := env.ServiceAccountKubeconfig(t, installNamespace, controllerSA)

	// refusedStart runs svm and expects it to exit non-zero within seconds
	// with one line that carries the API server's refusal and names the
	// role to bind, having sent a handful of requests.
	refusedStart := func(t *testing.T, role string, args ...string) {
		t.Helper()
		sent := len(audit.Requests(t, controllerUser))
		args = append([]string{"--leader-elect", "--leader-election-namespace", installNamespace}, args...)
		svm := framework.StartSVMWithKubeconfig(t, kubeconfig, framework.ControllerArgs(args...)...)
		if code := exitWithin(t, svm, 30*time.Second); code == 0 {
			t.Fatalf("svm controller exited 0 without its roles")
		}
		log := string(svm.Log(t))
		if !framework.OneLine(log) || !strings.Contains(log, "forbidden") || !strings.Contains(log, controllerUser) || !strings.Contains(log, role) {
			t.Errorf("svm's output is not one line naming the refusal, the user and %s:\n%s", role, log)
		}
		// Discovery of svm's API and of the in-tree one; the manager's
		// RESTMapper (the cache's per-type options map svm's types on
		// start): the two lists of groups and the document of each group
		// it maps; one list each: a handful, none of them again.
		if requests := audit.Requests(t, controllerUser)[sent:]; len(requests) > 8 {
			var sentList []string
			for _, r := range requests {
				sentList = append(sentList, r.Verb+" "+r.URI)
			}
			t.Errorf("svm sent %d requests before giving up, want at most 8: %s", len(requests), strings.Join(sentList, ", "))
		}
		t.Logf("output: %s", strings.TrimSpace(log))
	}

	t.Run("without the ClusterRoleBinding", func(t *testing.T) {
		deleteObject(t, env, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "svm-controller"}})
		refusedStart(t, "ClusterRole svm-controller")
	})
	t.Run("without the leader election RoleBinding", func(t *testing.T) {
		bind(t, env, "svm-controller", controllerSA)
		deleteObject(t, env, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: installNamespace, Name: "svm-leader-election"}})
		refusedStart(t, "Role svm-leader-election")
	})
	t.Run("without access to in-tree migrations", func(t *testing.T) {
		// An svm-controller role from before svm worked with the in-tree
		// migrator: no wildcard (which lists everything) and no rule for
		// storagemigration.k8s.io. The cluster serves that API, so svm
		// would watch it: it says at once that it may not.
		narrow := clusterRole(t, objs, "svm-controller").DeepCopy()
		narrow.Name = "svm-controller-without-in-tree"
		narrow.Rules = slices.DeleteFunc(narrow.Rules, func(r rbacv1.PolicyRule) bool {
			return slices.Contains(r.Resources, "*") || slices.Contains(r.APIGroups, "storagemigration.k8s.io")
		})
		if err := env.Client.Create(ctx(t), narrow); err != nil {
			t.Fatal(err)
		}
		deleteObject(t, env, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: controllerSA + "-svm-controller"}})
		bind(t, env, narrow.Name, controllerSA)
		// The leader election RoleBinding is gone (above): no election.
		refusedStart(t, "ClusterRole svm-controller", "--leader-elect=false")
		deleteObject(t, env, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: controllerSA + "-" + narrow.Name}})
		bind(t, env, "svm-controller", controllerSA)
	})
	t.Run("without access to the migrated resource", func(t *testing.T) {
		// svm-controller without its one wildcard rule: svm's own objects
		// are allowed, the widgets are not.
		narrow := clusterRole(t, objs, "svm-controller").DeepCopy()
		narrow.Name = "svm-controller-narrowed"
		narrow.Rules = slices.DeleteFunc(narrow.Rules, func(r rbacv1.PolicyRule) bool { return slices.Contains(r.Resources, "*") })
		if err := env.Client.Create(ctx(t), narrow); err != nil {
			t.Fatal(err)
		}
		deleteObject(t, env, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: controllerSA + "-svm-controller"}})
		bind(t, env, narrow.Name, controllerSA)

		svm := framework.StartSVMWithKubeconfig(t, kubeconfig, framework.ControllerArgs("--leader-elect", "--leader-election-namespace", installNamespace, "--trigger=false", "--leader-elect=false")...)
		m := env.WaitMigration(t, "widgets", 2*time.Minute, "finished", framework.Finished)
		failed := framework.Condition(m, migrationv1alpha1.MigrationFailed)
		if !framework.Failed(m) || failed.Reason != "Forbidden" || !strings.Contains(failed.Message, "forbidden") || !strings.Contains(failed.Message, controllerUser) {
			t.Errorf("Failed condition %+v, want reason Forbidden naming the refusal and the user", failed)
		}
		// No retry: one list of widgets, refused, and not a single write.
		var widgetRequests []string
		for _, r := range audit.Requests(t, controllerUser) {
			if r.ObjectRef != nil && r.ObjectRef.Resource == "widgets" {
				widgetRequests = append(widgetRequests, fmt.Sprintf("%s %d", r.Verb, r.Code()))
			}
		}
		if diff := cmp.Diff([]string{"list 403"}, widgetRequests); diff != "" {
			t.Errorf("svm's requests on widgets (-want +got):\n%s", diff)
		}
		warnings := 0
		framework.WaitFor(t.Context(), 10*time.Second, func() bool {
			warnings = 0
			for _, ev := range env.Events(t, "StorageVersionMigration", "widgets") {
				if ev.Type != "Normal" {
					warnings++
				}
			}
			return warnings > 0
		})
		if warnings != 1 {
			t.Errorf("%d warning events about the migration, want 1 (its failure)", warnings)
		}
		// It failed one migration, not itself: still running, and it
		// logged the failure once.
		time.Sleep(2 * time.Second)
		select {
		case <-exited(svm):
			t.Errorf("svm controller exited after a migration failed:\n%s", svm.Log(t))
		default:
		}
		if got := strings.Count(string(svm.Log(t)), "cannot list resource"); got != 1 {
			t.Errorf("svm logged the refusal %d times, want once:\n%s", got, svm.Log(t))
		}
		env.ExpectStored(t, framework.EtcdPrefix(framework.Widgets.GroupResource()), map[string]int{"example.com/v1": n})
		framework.Scenario{
			Name: "controller without access to widgets", Objects: n,
			Writes: env.ServerWrites(t, "widgets"), Retries: 0, Verified: !t.Failed(),
		}.Report(t)
	})
}

// exited is closed once p has exited.
func exited(p *framework.Process) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		p.ExitCode()
		close(done)
	}()
	return done
}
