//go:build e2e

package e2e_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
	"github.com/svm-project/svm/test/node"
)

const (
	namespace = "svm-system"
	// leaseName is svm controller's leader election lease.
	leaseName = "svm-controller.migration.k8s.io"
)

// startCluster starts a control plane whose API server pods reach through
// the kubernetes Service, a kube-controller-manager with every controller,
// and the node, with svm's image imported (hack/e2e passes the tarballs).
func startCluster(t *testing.T) (*framework.Env, string) {
	t.Helper()
	env := framework.Start(t, controlplane.Options{
		ServingIPs: []net.IP{net.ParseIP(node.IP), net.ParseIP(node.ServiceIP)},
		APIServerFlags: []string{"--bind-address=0.0.0.0", "--advertise-address=" + node.IP,
			"--kubelet-preferred-address-types=InternalIP"},
		ControllerManager:      true,
		ControllerManagerFlags: []string{"--controllers=*"},
	})
	dir := t.TempDir()
	started := time.Now()
	n, err := node.Start(framework.Context(t, 3*time.Minute), env.CP, node.Options{
		Dir: dir, PauseImage: os.Getenv("SVM_E2E_PAUSE_IMAGE"), Images: []string{os.Getenv("SVM_E2E_SVM_IMAGE")},
	})
	t.Cleanup(func() {
		if err := n.Stop(); err != nil {
			t.Errorf("stop the node: %v", err)
		}
	})
	if err != nil {
		t.Fatalf("start the node: %v (logs in %s)", err, dir)
	}
	t.Logf("node %s Ready %s after it started", node.Name, time.Since(started).Round(time.Second))
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.CP.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	return env, kubeconfig
}

// flipObjects is how many widgets the storage flip moves.
const flipObjects = 3000

// TestChartOnANode follows svm as an operator meets it, one step after
// another on the same cluster: installed by its chart, then a CRD's
// storage flipped under it.
func TestChartOnANode(t *testing.T) {
	env, kubeconfig := startCluster(t)
	env.CreateWidgetCRD(t, "v1")
	env.CreateWidgets(t, "v1", []string{"default"}, flipObjects)
	// The writes of the flip, undisturbed: what a takeover's are held to.
	var flipWrites int
	for _, step := range []struct {
		name string
		run  func(*testing.T, *framework.Env, string)
	}{
		{"helm install", install},
		{"a storage flip of 3,000 objects", func(t *testing.T, env *framework.Env, _ string) { flipWrites = flip(t, env) }},
		{"the leading pod deleted mid-migration", func(t *testing.T, env *framework.Env, _ string) { leaderDeleted(t, env, flipWrites) }},
	} {
		if !t.Run(step.name, func(t *testing.T) { step.run(t, env, kubeconfig) }) {
			t.Fatalf("%s failed: the steps after it need what it does", step.name)
		}
	}
}

// install installs the chart as its README says, with svm's image: both
// replicas become Ready, one holds the lease, and svm status, run from a
// workstation's kubeconfig, reads what the leading pod did.
func install(t *testing.T, env *framework.Env, kubeconfig string) {
	installed := time.Now()
	if out, stderr, err := framework.RunHelm(t, "install", "svm", "charts/svm", "-n", namespace, "--create-namespace",
		"--kubeconfig", kubeconfig, "--set", "image.tag=e2e"); err != nil {
		t.Fatalf("helm install: %v\n%s%s", err, out, stderr)
	}
	pods := waitReadyPods(t, env, 2, 3*time.Minute)
	t.Logf("pods %v Ready %s after helm install", pods, time.Since(installed).Round(time.Second))
	var lease coordinationv1.Lease
	err := wait.PollUntilContextTimeout(t.Context(), time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := env.Kube.CoordinationV1().Leases(namespace).Get(ctx, leaseName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, nil
		}
		lease = *l
		return true, nil
	})
	if err != nil {
		t.Fatalf("no pod took the lease %s/%s: %v", namespace, leaseName, err)
	}
	if holder := *lease.Spec.HolderIdentity; !slices.ContainsFunc(pods, func(p string) bool { return strings.HasPrefix(holder, p) }) {
		t.Errorf("lease held by %q, want one of the pods %v", holder, pods)
	} else {
		t.Logf("lease %s held by %s", leaseName, holder)
	}
	// The leader's trigger notes every resource: a StorageState each.
	var states migrationv1alpha1.StorageStateList
	err = wait.PollUntilContextTimeout(t.Context(), time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := env.Client.List(ctx, &states); err != nil {
			return false, nil
		}
		return slices.ContainsFunc(states.Items, func(s migrationv1alpha1.StorageState) bool { return s.Name == "deployments.apps" }), nil
	})
	if err != nil {
		t.Fatalf("the leading pod made %d StorageStates, none of deployments.apps: %v", len(states.Items), err)
	}
	code, stdout, stderr := framework.RunSVM(t, kubeconfig, time.Minute, "status")
	if code != 0 || !strings.Contains(stdout, "deployments.apps") {
		t.Errorf("svm status exited %d, want 0 and the StorageState of deployments.apps the pod made:\n%s%s", code, stdout, stderr)
	}
}

// flip switches the widgets' storage version to v2: the leading pod
// notices, migrates and prunes the CRD's storedVersions; etcd holds every
// widget in v2, its content unchanged. It returns svm's writes of widgets.
func flip(t *testing.T, env *framework.Env) int {
	before := env.TakeSnapshot(t, framework.Widgets)
	writesBefore := env.ServerWrites(t, "widgets")
	flipped := time.Now()
	env.SetCRDStorageVersion(t, framework.WidgetsCRDName, "v2")
	err := wait.PollUntilContextTimeout(t.Context(), 2*time.Second, 8*time.Minute, true, func(context.Context) (bool, error) {
		return slices.Equal(env.CRDStoredVersions(t, framework.WidgetsCRDName), []string{"v2"}), nil
	})
	if err != nil {
		t.Fatalf("storedVersions %v 8 minutes after the flip, want [v2]", env.CRDStoredVersions(t, framework.WidgetsCRDName))
	}
	t.Logf("storedVersions pruned to [v2] %s after the flip", time.Since(flipped).Round(time.Second))
	env.ExpectStored(t, framework.EtcdPrefix(framework.Widgets.GroupResource()), map[string]int{"example.com/v2": flipObjects})
	env.ExpectUnchanged(t, framework.Widgets, before)
	writes := env.ServerWrites(t, "widgets") - writesBefore
	t.Logf("%d writes of %d widgets (a rewrite each, and a move of the managedFields that named v1)", writes, flipObjects)
	return writes
}

// leaderDeleted flips the widgets back to v1 and deletes the leading pod
// while the migration runs: the other pod takes the lease within its
// duration and finishes the migration from its checkpoint, with at most
// 1.05 times the writes of the undisturbed flip before it (flipWrites: a
// rewrite of each widget, and a move of its managedFields off the version
// the prune drops).
func leaderDeleted(t *testing.T, env *framework.Env, flipWrites int) {
	before := env.TakeSnapshot(t, framework.Widgets)
	writesBefore := env.ServerWrites(t, "widgets")
	leader, duration := leaseHolder(t, env, "")
	env.SetCRDStorageVersion(t, framework.WidgetsCRDName, "v1")
	running := waitWidgetsMigrating(t, env)
	// Mid-way, by the API server's own count: a third of the writes.
	done := waitWrites(t, env, writesBefore+flipWrites/3) - writesBefore
	deleted := time.Now()
	if err := env.Kube.CoreV1().Pods(namespace).Delete(t.Context(), leader, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete the leading pod %s: %v", leader, err)
	}
	next, _ := leaseHolder(t, env, leader)
	took := time.Since(deleted)
	t.Logf("pod %s deleted after %d of the %d writes an undisturbed %s would make; %s took the lease %s later (lease duration %s)",
		leader, done, flipWrites, running.Name, next, took.Round(time.Second), duration)
	if took > duration {
		t.Errorf("the lease passed to %s %s after the leader was deleted, want within its duration %s", next, took, duration)
	}
	err := wait.PollUntilContextTimeout(t.Context(), 2*time.Second, 5*time.Minute, true, func(context.Context) (bool, error) {
		return slices.Equal(env.CRDStoredVersions(t, framework.WidgetsCRDName), []string{"v1"}), nil
	})
	if err != nil {
		t.Fatalf("storedVersions %v 5 minutes after the takeover, want [v1]", env.CRDStoredVersions(t, framework.WidgetsCRDName))
	}
	env.ExpectStored(t, framework.EtcdPrefix(framework.Widgets.GroupResource()), map[string]int{"example.com/v1": flipObjects})
	env.ExpectUnchanged(t, framework.Widgets, before)
	writes := env.ServerWrites(t, "widgets") - writesBefore
	t.Logf("%d writes of %d widgets across the takeover, %d in the undisturbed flip", writes, flipObjects, flipWrites)
	if limit := flipWrites * 105 / 100; writes > limit || writes < flipObjects {
		t.Errorf("%d writes of widgets, want from %d to %d (1.05 times the undisturbed flip's): the migration went on from its checkpoint",
			writes, flipObjects, limit)
	}
	waitReadyPods(t, env, 2, 3*time.Minute)
}

// leaseHolder waits until a pod other than not holds svm's lease, and
// returns its name and the lease's duration.
func leaseHolder(t *testing.T, env *framework.Env, not string) (string, time.Duration) {
	t.Helper()
	var holder string
	var duration time.Duration
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := env.Kube.CoordinationV1().Leases(namespace).Get(ctx, leaseName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil || l.Spec.LeaseDurationSeconds == nil {
			return false, nil
		}
		// controller-runtime's identity is the pod's name, "_", a uuid.
		holder, _, _ = strings.Cut(*l.Spec.HolderIdentity, "_")
		duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
		return holder != "" && holder != not, nil
	})
	if err != nil {
		t.Fatalf("no pod but %q holds the lease: %v", not, err)
	}
	return holder, duration
}

// waitWidgetsMigrating waits for a migration of the widgets that runs:
// past the settle-and-drain wait that follows a flip, writing.
func waitWidgetsMigrating(t *testing.T, env *framework.Env) *migrationv1alpha1.StorageVersionMigration {
	t.Helper()
	var found *migrationv1alpha1.StorageVersionMigration
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 8*time.Minute, true, func(ctx context.Context) (bool, error) {
		var list migrationv1alpha1.StorageVersionMigrationList
		if err := env.Client.List(ctx, &list); err != nil {
			return false, nil
		}
		for i, m := range list.Items {
			if m.Spec.Resource.Resource == "widgets" && !m.IsFinished() && m.HasCondition(migrationv1alpha1.MigrationRunning) {
				found = &list.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no migration of the widgets seen running: %v", err)
	}
	return found
}

// waitWrites waits until the API server has answered at least n writes of
// widgets in all, and returns its count.
func waitWrites(t *testing.T, env *framework.Env, n int) int {
	t.Helper()
	var got int
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		got = env.ServerWrites(t, "widgets")
		return got >= n, nil
	})
	if err != nil {
		t.Fatalf("%d writes of widgets, want %d: the migration stopped", got, n)
	}
	return got
}

// waitReadyPods waits until svm's Deployment has want pods, each Ready,
// and returns their names.
func waitReadyPods(t *testing.T, env *framework.Env, want int, timeout time.Duration) []string {
	t.Helper()
	var names []string
	var last string
	err := wait.PollUntilContextTimeout(t.Context(), time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := env.Kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=svm"})
		if err != nil {
			return false, nil
		}
		names, last = nil, ""
		for _, p := range list.Items {
			last += " " + p.Name + ":" + string(p.Status.Phase)
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
					names = append(names, p.Name)
				}
			}
		}
		return len(names) == want && len(list.Items) == want, nil
	})
	if err != nil {
		t.Fatalf("svm's pods not %d and Ready within %s:%s", want, timeout, last)
	}
	return names
}
