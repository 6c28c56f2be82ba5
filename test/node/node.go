package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/svm-project/svm/test/controlplane"
)

// Options say what the node runs.
type Options struct {
	// Dir holds the node's state and logs; it must exist.
	Dir string
	// CNIBinDir holds the CNI plugins; empty means Debian's /usr/lib/cni.
	CNIBinDir string
	// PauseImage is a tarball of the pod sandbox image, tagged PauseImage.
	PauseImage string
	// Images are more image tarballs to import (svm's).
	Images []string
	// ReadyTimeout bounds how long the node may take to become Ready; zero
	// means two minutes.
	ReadyTimeout time.Duration
}

// Node is a running containerd, kubelet and kube-scheduler.
type Node struct {
	dir                            string
	containerd, kubelet, scheduler *daemon
}

// Start sets up the namespace's network, starts containerd and imports
// the images, then the kubelet and kube-scheduler against cp, and waits
// until the node is Ready. Call Stop, also after an error.
func Start(ctx context.Context, cp *controlplane.ControlPlane, opts Options) (*Node, error) {
	n := &Node{dir: opts.Dir}
	if err := inOwnNetwork(); err != nil {
		return n, err
	}
	if opts.CNIBinDir == "" {
		opts.CNIBinDir = "/usr/lib/cni"
	}
	if err := setUpNetwork(cp.APIPort()); err != nil {
		return n, err
	}
	if err := n.startContainerd(ctx, opts); err != nil {
		return n, err
	}
	kubeconfig := filepath.Join(n.dir, "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		return n, err
	}
	if err := n.startKubelet(cp, kubeconfig); err != nil {
		return n, err
	}
	var err error
	n.scheduler, err = startDaemon("kube-scheduler", cp.BinPath("kube-scheduler"), filepath.Join(n.dir, "kube-scheduler.log"),
		"--kubeconfig="+kubeconfig, "--leader-elect=false", "--secure-port=0")
	if err != nil {
		return n, err
	}
	timeout := opts.ReadyTimeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	return n, n.waitReady(ctx, cp, timeout)
}

// startContainerd writes containerd's and CNI's configuration, starts
// containerd and imports the images.
func (n *Node) startContainerd(ctx context.Context, opts Options) error {
	dir := filepath.Join(n.dir, "containerd")
	if err := os.MkdirAll(filepath.Join(dir, "net.d"), 0o700); err != nil {
		return err
	}
	files := map[string]string{
		filepath.Join(dir, "config.toml"):                  containerdConfig(dir, opts.CNIBinDir),
		filepath.Join(dir, "net.d", "10-svm-e2e.conflist"): cniConfig(dir),
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return err
		}
	}
	var err error
	n.containerd, err = startDaemon("containerd", "containerd", filepath.Join(n.dir, "containerd.log"), "--config", filepath.Join(dir, "config.toml"))
	if err != nil {
		return err
	}
	socket := containerdSocket(dir)
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, err := os.Stat(socket)
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("containerd did not listen on %s: %w", socket, err)
	}
	for _, image := range append([]string{opts.PauseImage}, opts.Images...) {
		if err := run("ctr", "--address", socket, "--namespace", "k8s.io", "images", "import", image); err != nil {
			return err
		}
	}
	return nil
}

// startKubelet starts the kubelet, registering the node by Name at IP.
func (n *Node) startKubelet(cp *controlplane.ControlPlane, kubeconfig string) error {
	dir := filepath.Join(n.dir, "kubelet")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	config := filepath.Join(n.dir, "kubelet.yaml")
	if err := os.WriteFile(config, []byte(kubeletConfig(dir, containerdSocket(filepath.Join(n.dir, "containerd")))), 0o600); err != nil {
		return err
	}
	var err error
	n.kubelet, err = startDaemon("kubelet", cp.BinPath("kubelet"), filepath.Join(n.dir, "kubelet.log"),
		"--config="+config, "--kubeconfig="+kubeconfig, "--root-dir="+dir, "--node-ip="+IP, "--hostname-override="+Name, "--v=2")
	return err
}

// waitReady waits until the node reports Ready.
func (n *Node) waitReady(ctx context.Context, cp *controlplane.ControlPlane, timeout time.Duration) error {
	client, err := kubernetes.NewForConfig(cp.RESTConfig())
	if err != nil {
		return err
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		if !n.kubelet.alive() {
			return false, errors.New("the kubelet exited; see kubelet.log")
		}
		node, err := client.CoreV1().Nodes().Get(ctx, Name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				last = string(c.Status) + ": " + c.Message
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("node %s not Ready within %s (%s): %w", Name, timeout, last, err)
	}
	return nil
}

// Stop stops kube-scheduler and the kubelet, then every pod's processes
// (containerd's shims and what they run), then containerd, and unmounts
// what they mounted under the node's directory.
func (n *Node) Stop() error {
	errs := []error{n.scheduler.stop(10 * time.Second), n.kubelet.stop(30 * time.Second)}
	errs = append(errs, n.killPods())
	errs = append(errs, n.containerd.stop(10*time.Second), unmountAll(n.dir))
	return errors.Join(errs...)
}
