//go:build e2e

package e2e_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/framework"
	"github.com/svm-project/svm/test/node"
)

const (
	// secretsNamespace holds the large Secrets.
	secretsNamespace = "vault"
	secretCount      = 500
	// secretSize is each Secret's data, near the API's limit of 1 MiB.
	secretSize = 1_000_000
	// memoryLimit is the chart's memory limit.
	memoryLimit = 256 << 20
)

var secretsPrefix = "/registry/secrets/" + secretsNamespace + "/"

// bigSecretsReencrypted rotates the encryption key under 500 Secrets of
// 1 MB, 500 MB in all, twice the chart's memory limit: the leading pod
// re-encrypts every one under the new key by itself, and neither pod's
// container is killed (restart count 0) by the limit, which the kubelet
// set on the container's cgroup.
func bigSecretsReencrypted(t *testing.T, c *cluster) {
	env := c.env
	createBigSecrets(t, env)
	before := env.TakeDigests(t, framework.Secrets, secretsNamespace)
	if diff := cmp.Diff(map[string]int{"encrypted:aescbc:key1": secretCount}, env.StoredVersions(t, secretsPrefix)); diff != "" {
		t.Fatalf("the Secrets in etcd before the rotation (-want +got):\n%s", diff)
	}
	writesBefore := env.ServerWrites(t, "secrets")
	config, loaded := c.rotate(t, "key2")
	waitReencrypted(t, env, config, 10*time.Minute)
	t.Logf("every Secret rewritten under %s %s after the API server loaded it; %d writes of Secrets",
		config, time.Since(loaded).Round(time.Second), env.ServerWrites(t, "secrets")-writesBefore)
	env.ExpectStored(t, secretsPrefix, map[string]int{"encrypted:aescbc:key2": secretCount})
	if diff := before.Diff(env.TakeDigests(t, framework.Secrets, secretsNamespace)); diff != "" {
		t.Errorf("the Secrets' content changed (-before +after):\n%s", diff)
	}
	for _, pod := range svmPods(t, env) {
		expectNeverRestarted(t, pod)
		expectMemoryLimited(t, pod)
	}
}

// createBigSecrets creates the large Secrets, each of distinct data.
func createBigSecrets(t *testing.T, env *framework.Env) {
	t.Helper()
	env.CreateNamespace(t, secretsNamespace)
	created := time.Now()
	g, ctx := errgroup.WithContext(framework.Context(t, 5*time.Minute))
	g.SetLimit(4)
	for i := range secretCount {
		g.Go(func() error {
			data := make([]byte, secretSize)
			_, _ = rand.NewChaCha8([32]byte{byte(i), byte(i >> 8)}).Read(data)
			s := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%03d", i), Namespace: secretsNamespace},
				Data:       map[string][]byte{"blob": data},
			}
			_, err := env.Kube.CoreV1().Secrets(secretsNamespace).Create(ctx, s, metav1.CreateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("create the Secrets: %v", err)
	}
	t.Logf("%d Secrets of %d bytes created in %s", secretCount, secretSize, time.Since(created).Round(time.Second))
}

// rotate puts a new key named name first in the API server's encryption
// configuration, the others still reading, and waits until the server has
// loaded it. It returns the configuration's hash and when it was loaded.
func (c *cluster) rotate(t *testing.T, name string) (string, time.Time) {
	t.Helper()
	c.keys = append([]framework.EncryptionKey{framework.NewEncryptionKey(t, name)}, c.keys...)
	config := framework.WriteEncryptionConfigFile(t, c.encryption, c.keys...)
	framework.WaitEncryptionConfig(t, c.env.CP.RESTConfig(), config)
	return config, time.Now()
}

// waitReencrypted waits until the StorageState of Secrets records that
// every Secret was rewritten under the encryption configuration config.
func waitReencrypted(t *testing.T, env *framework.Env, config string, timeout time.Duration) {
	t.Helper()
	env.WaitStorageState(t, framework.Secrets.GroupResource(), timeout, "rewritten under "+config, func(s *migrationv1alpha1.StorageState) bool {
		return s.Status.Encryption != nil && s.Status.Encryption.RewrittenConfigHash == config
	})
}

// upgradeMidMigration rotates the key again and, while the leading pod
// re-encrypts the Secrets, upgrades the release to a changed chart (a new
// version whose default --workers differs): the Deployment rolls both
// pods, and the re-encryption finishes, every Secret under the new key,
// their content unchanged.
func upgradeMidMigration(t *testing.T, c *cluster) {
	env := c.env
	before := env.TakeDigests(t, framework.Secrets, secretsNamespace)
	oldPods := svmPods(t, env)
	writesBefore := env.ServerWrites(t, "secrets")
	config, _ := c.rotate(t, "key3")
	running := waitMigrating(t, env, "secrets")
	// A tenth of the way: the upgrade lands while it writes.
	done := waitWrites(t, env, "secrets", writesBefore+secretCount/10) - writesBefore
	leader, _ := leaseHolder(t, env, "")
	upgraded := time.Now()
	if out, stderr, err := framework.RunHelm(t, "upgrade", "svm", changedChart(t), "-n", namespace,
		"--kubeconfig", c.kubeconfig, "--set", "image.tag=e2e"); err != nil {
		t.Fatalf("helm upgrade: %v\n%s%s", err, out, stderr)
	}
	t.Logf("helm upgrade after %d writes of %s by %s", done, running.Name, leader)
	waitReencrypted(t, env, config, 10*time.Minute)
	finisher, _ := leaseHolder(t, env, "")
	writes := env.ServerWrites(t, "secrets") - writesBefore
	t.Logf("every Secret rewritten under %s %s after helm upgrade, the lease held by %s; %d writes of Secrets",
		config, time.Since(upgraded).Round(time.Second), finisher, writes)
	// The rollout replaces both pods within seconds; the re-encryption
	// takes longer, so the pod that finishes it is a new one.
	if slices.ContainsFunc(oldPods, func(p corev1.Pod) bool { return p.Name == finisher }) {
		t.Errorf("the re-encryption finished under %s, a pod from before the upgrade: the upgrade did not land while it ran", finisher)
	}
	// Helm's release records and svm's own Secrets in its namespace are
	// Secrets too: a few writes over one each.
	if limit := secretCount * 105 / 100; writes > limit {
		t.Errorf("%d writes of Secrets, want at most %d (1.05 times the Secrets): the re-encryption went on from its checkpoint", writes, limit)
	}
	pods := waitRolledOut(t, env, oldPods)
	env.ExpectStored(t, secretsPrefix, map[string]int{"encrypted:aescbc:key3": secretCount})
	if diff := before.Diff(env.TakeDigests(t, framework.Secrets, secretsNamespace)); diff != "" {
		t.Errorf("the Secrets' content changed (-before +after):\n%s", diff)
	}
	for _, pod := range pods {
		if args := pod.Spec.Containers[0].Args; !slices.Contains(args, "--workers=4") {
			t.Errorf("pod %s runs with %v: not the upgraded chart's --workers=4", pod.Name, args)
		}
		expectNeverRestarted(t, pod)
	}
}

// changedChart is a copy of charts/svm as a next release would change it:
// a new version, and a default (controller.workers) that changes the pods.
func changedChart(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "svm")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(framework.RepoRoot(), "charts", "svm"))); err != nil {
		t.Fatal(err)
	}
	for file, change := range map[string][2]string{
		"Chart.yaml":  {"\nversion: 0.1.0\n", "\nversion: 0.2.0\n"},
		"values.yaml": {"\n  workers: null\n", "\n  workers: 4\n"},
	} {
		path := filepath.Join(dir, file)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), change[0]) {
			t.Fatalf("charts/svm/%s has no %q to change", file, strings.TrimSpace(change[0]))
		}
		if err := os.WriteFile(path, []byte(strings.Replace(string(data), change[0], change[1], 1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// waitRolledOut waits until svm's two pods are Ready and none of them is
// one of old, and returns them.
func waitRolledOut(t *testing.T, env *framework.Env, old []corev1.Pod) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(t.Context(), time.Second, 5*time.Minute, true, func(context.Context) (bool, error) {
		pods = svmPods(t, env)
		if len(pods) != 2 {
			return false, nil
		}
		for _, p := range pods {
			if !ready(p) || slices.ContainsFunc(old, func(o corev1.Pod) bool { return o.UID == p.UID }) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("svm's pods not rolled out to two new Ready pods: %v", podNames(pods))
	}
	return pods
}

// expectNeverRestarted reports an error if the pod's container restarted.
func expectNeverRestarted(t *testing.T, pod corev1.Pod) {
	t.Helper()
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.RestartCount != 0 {
			t.Errorf("container %s of pod %s restarted %d times, last %+v", cs.Name, pod.Name, cs.RestartCount, cs.LastTerminationState.Terminated)
		}
	}
}

// expectMemoryLimited reports an error unless the kubelet limited the
// memory of the pod's container to the chart's limit, and logs its peak.
func expectMemoryLimited(t *testing.T, pod corev1.Pod) {
	t.Helper()
	cgroup, err := node.ContainerCgroup("memory", string(pod.UID), pod.Status.ContainerStatuses[0].ContainerID)
	if err != nil {
		t.Error(err)
		return
	}
	limit, peak := readCgroupInt(t, cgroup, "memory.limit_in_bytes"), readCgroupInt(t, cgroup, "memory.max_usage_in_bytes")
	if limit != memoryLimit {
		t.Errorf("pod %s's memory cgroup limit is %d bytes, want the chart's %d", pod.Name, limit, memoryLimit)
	}
	t.Logf("pod %s: at most %.0f MiB charged to its cgroup, whose limit is %.0f MiB", pod.Name, float64(peak)/(1<<20), float64(limit)/(1<<20))
}

func readCgroupInt(t *testing.T, dir, file string) int64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		t.Fatalf("%s/%s: %v", dir, file, err)
	}
	return v
}
