//go:build e2e

package e2e_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/svm-project/svm/test/node"
)

// frozenLeader stops every process of the leading pod's container
// (SIGSTOP: a controller that hangs, answering nothing, its probes
// included): the other pod takes the lease when it expires, and the
// kubelet, its liveness probe failing, kills the container and starts it
// again; the pod is Ready again with one restart.
func frozenLeader(t *testing.T, c *cluster) {
	env := c.env
	leader, duration := leaseHolder(t, env, "")
	pod, err := env.Kube.CoreV1().Pods(namespace).Get(t.Context(), leader, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	status := pod.Status.ContainerStatuses[0]
	cgroup, err := node.ContainerCgroup("memory", string(pod.UID), status.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	pids := node.CgroupProcesses(cgroup)
	if len(pids) == 0 {
		t.Fatalf("no process in the cgroup %s of pod %s", cgroup, leader)
	}
	frozen := time.Now()
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
			t.Fatalf("stop process %d of pod %s: %v", pid, leader, err)
		}
	}
	next, _ := leaseHolder(t, env, leader)
	t.Logf("pod %s frozen; %s took the lease %s later (lease duration %s)", leader, next, time.Since(frozen).Round(time.Second), duration)
	err = wait.PollUntilContextTimeout(t.Context(), time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := env.Kube.CoreV1().Pods(namespace).Get(ctx, leader, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		return p.Status.ContainerStatuses[0].RestartCount == status.RestartCount+1 && ready(*p), nil
	})
	if err != nil {
		t.Fatalf("pod %s not restarted and Ready 5 minutes after it froze: %+v", leader, pod.Status.ContainerStatuses[0])
	}
	t.Logf("pod %s restarted by the kubelet and Ready %s after it froze", leader, time.Since(frozen).Round(time.Second))
	expectLivenessKill(t, c, leader)
	waitReadyPods(t, env, 2, time.Minute)
}

// expectLivenessKill reports an error unless the kubelet's events on pod
// say its liveness probe failed and it killed the container for it.
func expectLivenessKill(t *testing.T, c *cluster, pod string) {
	t.Helper()
	events, err := c.env.Kube.CoreV1().Events(namespace).List(t.Context(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", pod).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var unhealthy, killed bool
	var seen []string
	for _, e := range events.Items {
		seen = append(seen, e.Reason+": "+e.Message)
		unhealthy = unhealthy || e.Reason == "Unhealthy" && strings.Contains(e.Message, "Liveness probe failed")
		killed = killed || e.Reason == "Killing" && strings.Contains(e.Message, "failed liveness probe")
	}
	if !unhealthy || !killed {
		t.Errorf("pod %s's events do not say the kubelet killed it for its liveness probe:\n%s", pod, strings.Join(seen, "\n"))
	}
}
