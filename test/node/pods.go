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

// podCgroups is where the kubelet puts pods (cgroup v1, cgroupfs driver):
// one hierarchy is enough to find their processes.
const podCgroups = "/sys/fs/cgroup/pids/kubepods"

// killPods kills every process of every pod, and the containerd shims
// that ran them for the node whose state is under dir: a stopped kubelet
// leaves its pods running.
func (n *Node) killPods() error {
	var errs []error
	for _, pid := range append(podProcesses(), n.shims()...) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// podProcesses lists the processes in the pods' cgroups.
func podProcesses() []int {
	var pids []int
	_ = filepath.WalkDir(podCgroups, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		data, _ := os.ReadFile(path)
		for _, field := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(field); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
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
