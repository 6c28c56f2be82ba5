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

// cluster is what the steps of TestChartOnANode share.
type cluster struct {
	env        *framework.Env
	kubeconfig string
	// encryption is the API server's encryption configuration, which it
	// reloads when the file changes; keys are its aescbc keys, the
	// writing one first.
	encryption string
	keys       []framework.EncryptionKey
	// flipWrites are the writes of the undisturbed storage flip: what a
	// takeover's are held to.
	flipWrites int
}

// startCluster starts a control plane whose API server pods reach through
// the kubernetes Service, encrypting Secrets under key1 and reloading its
// encryption configuration, a kube-controller-manager with every
// controller, and the node, with svm's image imported (hack/e2e passes the
// tarballs). When the test fails, the node's logs and every pod's are kept
// with the control plane's (controlplane.ArtifactsEnv).
func startCluster(t *testing.T) *cluster {
	t.Helper()
	c := &cluster{encryption: filepath.Join(t.TempDir(), "encryption.yaml"), keys: []framework.EncryptionKey{framework.NewEncryptionKey(t, "key1")}}
	framework.WriteEncryptionConfigFile(t, c.encryption, c.keys...)
	c.env = framework.Start(t, controlplane.Options{
		ServingIPs: []net.IP{net.ParseIP(node.IP), net.ParseIP(node.ServiceIP)},
		APIServerFlags: append([]string{"--bind-address=0.0.0.0", "--advertise-address=" + node.IP,
			"--kubelet-preferred-address-types=InternalIP"}, framework.AutomaticReloadFlags(c.encryption)...),
		ControllerManager:      true,
		ControllerManagerFlags: []string{"--controllers=*"},
	})
	dir := t.TempDir()
	started := time.Now()
	n, err := node.Start(framework.Context(t, 3*time.Minute), c.env.CP, node.Options{
		Dir: dir, PauseImage: os.Getenv("SVM_E2E_PAUSE_IMAGE"), Images: []string{os.Getenv("SVM_E2E_SVM_IMAGE")},
	})
	t.Cleanup(func() {
		if t.Failed() {
			keepNodeLogs(t, dir)
		}
		if err := n.Stop(); err != nil {
			t.Errorf("stop the node: %v", err)
		}
	})
	if err != nil {
		t.Fatalf("start the node: %v", err)
	}
	t.Logf("node %s Ready %s after it started", node.Name, time.Since(started).Round(time.Second))
	c.kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.env.CP.WriteKubeconfig(c.kubeconfig); err != nil {
		t.Fatal(err)
	}
	return c
}

// keepNodeLogs keeps the logs of containerd, the kubelet and
// kube-scheduler, and every container's, from the node's directory dir.
func keepNodeLogs(t *testing.T, dir string) {
	for _, name := range []string{"containerd.log", "kubelet.log", "kube-scheduler.log"} {
		controlplane.KeepArtifact(t, name, filepath.Join(dir, name))
	}
	// The kubelet's pod logs: <namespace>_<pod>_<uid>/<container>/<restart>.log.
	logs, _ := filepath.Glob(filepath.Join(dir, "kubelet", "pod-logs", "*", "*", "*.log"))
	for _, path := range logs {
		rel, _ := filepath.Rel(filepath.Join(dir, "kubelet", "pod-logs"), path)
		controlplane.KeepArtifact(t, "pod_"+strings.ReplaceAll(rel, "/", "_"), path)
	}
}

// flipObjects is how many widgets the storage flip moves.
const flipObjects = 3000

// TestChartOnANode follows svm as an operator meets it, one step after
// another on the same cluster: installed by its chart, a CRD's storage
// flipped under it, its leader deleted, an encryption key rotated, the
// chart upgraded, a replica frozen, the chart uninstalled.
func TestChartOnANode(t *testing.T) {
	c := startCluster(t)
	c.env.CreateWidgetCRD(t, "v1")
	c.env.CreateWidgets(t, "v1", []string{"default"}, flipObjects)
	for _, step := range []struct {
		name string
		run  func(*testing.T, *cluster)
	}{
		{"helm install", install},
		{"a storage flip of 3,000 objects", flip},
		{"the leading pod deleted mid-migration", leaderDeleted},
		{"500 Secrets of 1 MB re-encrypted under the memory limit", bigSecretsReencrypted},
		{"helm upgrade while a re-encryption runs", upgradeMidMigration},
		{"a frozen leader restarted by its liveness probe", frozenLeader},
		{"helm uninstall", uninstall},
	} {
		if !t.Run(step.name, func(t *testing.T) { step.run(t, c) }) {
			t.Fatalf("%s failed: the steps after it need what it does", step.name)
		}
	}
}

// install installs the chart as its README says, with svm's image: both
// replicas become Ready, one holds the lease, and svm status, run from a
// workstation's kubeconfig, reads what the leading pod did.
func install(t *testing.T, c *cluster) {
	env, kubeconfig := c.env, c.kubeconfig
	installed := time.Now()
	if out, stderr, err := framework.RunHelm(t, "install", "svm", "charts/svm", "-n", namespace, "--create-namespace",
		"--kubeconfig", kubeconfig, "--set", "image.tag=e2e"); err != nil {
		t.Fatalf("helm install: %v\n%s%s", err, out, stderr)
	}
	pods := waitReadyPods(t, env, 2, 3*time.Minute)
	t.Logf("pods %v Ready %s after helm install", pods, time.Since(installed).Round(time.Second))
	// The pods passed the restricted Pod Security Standard, which the
	// chart's namespace enforces.
	if ns, err := env.Kube.CoreV1().Namespaces().Get(t.Context(), namespace, metav1.GetOptions{}); err != nil {
		t.Error(err)
	} else if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		t.Errorf("namespace %s enforces %q, want the restricted Pod Security Standard", namespace, got)
	}
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
// widget in v2, its content unchanged. It keeps svm's writes of widgets
// in c.flipWrites.
func flip(t *testing.T, c *cluster) {
	env := c.env
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
	c.flipWrites = writes
}

// leaderDeleted flips the widgets back to v1 and deletes the leading pod
// while the migration runs: the other pod takes the lease within its
// duration and finishes the migration from its checkpoint, with at most
// 1.05 times the writes of the undisturbed flip before it (c.flipWrites: a
// rewrite of each widget, and a move of its managedFields off the version
// the prune drops).
func leaderDeleted(t *testing.T, c *cluster) {
	env, flipWrites := c.env, c.flipWrites
	before := env.TakeSnapshot(t, framework.Widgets)
	writesBefore := env.ServerWrites(t, "widgets")
	leader, duration := leaseHolder(t, env, "")
	env.SetCRDStorageVersion(t, framework.WidgetsCRDName, "v1")
	running := waitMigrating(t, env, "widgets")
	// Mid-way, by the API server's own count: a third of the writes.
	done := waitWrites(t, env, "widgets", writesBefore+flipWrites/3) - writesBefore
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

// waitMigrating waits for a migration of resource that runs: past the
// settle-and-drain wait that follows a storage flip, writing.
func waitMigrating(t *testing.T, env *framework.Env, resource string) *migrationv1alpha1.StorageVersionMigration {
	t.Helper()
	var found *migrationv1alpha1.StorageVersionMigration
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 8*time.Minute, true, func(ctx context.Context) (bool, error) {
		var list migrationv1alpha1.StorageVersionMigrationList
		if err := env.Client.List(ctx, &list); err != nil {
			return false, nil
		}
		for i, m := range list.Items {
			if m.Spec.Resource.Resource == resource && !m.IsFinished() && m.HasCondition(migrationv1alpha1.MigrationRunning) {
				found = &list.Items[i]
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no migration of %s seen running: %v", resource, err)
	}
	return found
}

// waitWrites waits until the API server has answered at least n writes of
// resource in all, and returns its count.
func waitWrites(t *testing.T, env *framework.Env, resource string, n int) int {
	t.Helper()
	var got int
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		got = env.ServerWrites(t, resource)
		return got >= n, nil
	})
	if err != nil {
		t.Fatalf("%d writes of %s, want %d: the migration stopped", got, resource, n)
	}
	return got
}

// waitReadyPods waits until svm's Deployment has want pods, each Ready,
// and returns their names.
func waitReadyPods(t *testing.T, env *framework.Env, want int, timeout time.Duration) []string {
	t.Helper()
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(t.Context(), time.Second, timeout, true, func(context.Context) (bool, error) {
		pods = svmPods(t, env)
		return len(pods) == want && !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return !ready(p) }), nil
	})
	if err != nil {
		t.Fatalf("svm's pods not %d and Ready within %s: %v", want, timeout, podNames(pods))
	}
	return podNames(pods)
}

// svmPods lists the pods of svm's Deployment, none when the API server
// does not answer.
func svmPods(t *testing.T, env *framework.Env) []corev1.Pod {
	t.Helper()
	list, err := env.Kube.CoreV1().Pods(namespace).List(t.Context(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=svm"})
	if err != nil {
		t.Logf("list svm's pods: %v", err)
		return nil
	}
	return list.Items
}

// ready reports whether the pod's Ready condition is true.
func ready(p corev1.Pod) bool {
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
	})
}

// podNames are the pods' names.
func podNames(pods []corev1.Pod) []string {
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	return names
}
