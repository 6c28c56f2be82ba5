package node

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// killPods kills every process of every pod, and the containerd shims
// that ran them for the node whose state is under dir: a stopped kubelet
// leaves its pods running.
func (n *Node) killPods() error {
	var errs []error
	for _, pid := range append(PodProcesses(), n.shims()...) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// PodProcesses lists the processes in the kubelet's cgroups: every pod's.
func PodProcesses() []int {
	var pids []int
	for _, c := range PodCgroups() {
		pids = append(pids, CgroupProcesses(c)...)
	}
	return pids
}

// CgroupProcesses lists the processes in the cgroup at dir.
func CgroupProcesses(dir string) []int {
	var pids []int
	data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ContainerCgroup is the directory of a container's cgroup in the
// hierarchy of controller (cgroup v1: memory, cpu, ...), found by its
// pod's UID and the container's ID as the pod's status gives it
// (containerd://<id>): the kubelet's cgroupfs driver puts it under
// kubepods, then the pod's QoS class unless Guaranteed, then the pod.
func ContainerCgroup(controller, podUID, containerID string) (string, error) {
	_, id, ok := strings.Cut(containerID, "://")
	if !ok || id == "" {
		return "", fmt.Errorf("container ID %q: want <runtime>://<id>", containerID)
	}
	for _, pattern := range []string{"kubepods/pod%s/%s", "kubepods/*/pod%s/%s"} {
		found, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", controller, fmt.Sprintf(pattern, podUID, id)))
		if len(found) == 1 {
			return found[0], nil
		}
	}
	return "", fmt.Errorf("no %s cgroup of container %s of pod %s", controller, id, podUID)
}

// PodCgroups are the kubelet's cgroups (cgroup v1, the cgroupfs driver:
// kubepods under every hierarchy), the deepest first, so that each is
// empty of children when it is removed.
func PodCgroups() []string {
	var dirs []string
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	for _, root := range roots {
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
	}
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	return dirs
}

// shims lists the containerd shims serving this node's containerd: their
// command line names its socket's directory.
func (n *Node) shims() []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if bytes.Contains(cmdline, []byte("containerd-shim")) && bytes.Contains(cmdline, []byte(n.dir)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// unmountAll unmounts whatever is mounted under dir (containers' root
// filesystems, pods' volumes), the deepest first: in the test's mount
// namespace they would outlive the node and keep dir from being removed.
func unmountAll(dir string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	slices.SortFunc(points, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}
