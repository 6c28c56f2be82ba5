package node

import (
	"fmt"
	"path/filepath"
)

// The node's addresses: its own (a veth inside the test's network
// namespace), its pods' (the CNI bridge), and the kubernetes Service's
// (test/controlplane's --service-cluster-ip-range is 10.0.0.0/24).
const (
	IP         = "10.213.0.1"
	nodePrefix = 24
	peerIP     = "10.213.0.2"
	podSubnet  = "10.214.0.0/24"
	ServiceIP  = "10.0.0.1"
	// Name is the node's name.
	Name = "svm-e2e-node"
	// PauseImage is the pod sandbox's image, which the node imports from
	// a tarball instead of pulling (Options.PauseImage).
	PauseImage = "registry.k8s.io/pause:3.10"
)

// containerdConfig keeps all of containerd's state under dir; the CRI
// plugin uses the imported pause image and the CNI plugins of Debian's
// containernetworking-plugins. restrict_oom_score_adj: the machines the
// tests run on cannot lower a process's oom_score_adj, and without it
// every pod sandbox fails to start.
func containerdConfig(dir, cniBinDir string) string {
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[6]q
    conf_dir = %[7]q
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), containerdSocket(dir), filepath.Join(dir, "opt"),
		PauseImage, cniBinDir, filepath.Join(dir, "net.d"))
}

func containerdSocket(dir string) string { return filepath.Join(dir, "containerd.sock") }

// cniConfig is a bridge with host-local addresses from podSubnet (kept
// under dir), the node its gateway, traffic leaving it masqueraded.
func cniConfig(dir string) string {
	return fmt.Sprintf(`{"cniVersion": "0.4.0", "name": "svm-e2e", "plugins": [{
  "type": "bridge", "bridge": "svme2e0", "isGateway": true, "ipMasq": true,
  "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}
}]}
`, podSubnet, filepath.Join(dir, "ipam"))
}

// kubeletConfig is the kubelet's configuration: cgroup v1 and the
// cgroupfs driver (what the test machines have), swap allowed, its state
// and pod logs under dir, no DNS, and eviction thresholds low enough that
// a full shared disk does not evict svm's pods.
func kubeletConfig(dir, runtimeSocket string) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://%[1]s
address: %[2]s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
podLogsDir: %[3]q
resolvConf: ""
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`, runtimeSocket, IP, filepath.Join(dir, "pod-logs"))
}
