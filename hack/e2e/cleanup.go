package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/svm-project/svm/test/node"
)

// cleanUp stops what the tests left running and puts back what a kubelet
// changed on the machine: every process in network namespace ns (the
// control plane, containerd and its shims, the kubelet) and in the pods'
// cgroups, those cgroups, the sysctls, the pods' network namespace files,
// the directories that were not there before; then it removes ns.
func cleanUp(ns string, before hostState) error {
	var errs []error
	for range 3 {
		pids := append(processesIn(ns), node.PodProcesses()...)
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(time.Second)
	}
	for _, c := range node.PodCgroups() {
		if err := os.Remove(c); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", c, err))
		}
	}
	for name, v := range before.sysctls {
		if err := os.WriteFile(filepath.Join("/proc/sys", name), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s: %w", name, err))
		}
	}
	after, _ := filepath.Glob("/run/netns/*")
	for _, f := range podNetns(before.netns, after) {
		_ = syscall.Unmount(f, syscall.MNT_DETACH)
		errs = append(errs, os.Remove(f))
	}
	for _, d := range hostDirs {
		if !slices.Contains(before.dirs, d) {
			errs = append(errs, os.RemoveAll(d))
		}
	}
	if err := command("ip", "netns", "delete", ns).Run(); err != nil {
		errs = append(errs, fmt.Errorf("delete network namespace %s: %w", ns, err))
	}
	return errors.Join(errs...)
}

// podNetns are the files in after that containerd made for the pods'
// network namespaces (it names them cni-<uuid>) and were not in before.
// Any other new file is another program's: checkHost reports it.
func podNetns(before, after []string) []string {
	var pods []string
	for _, f := range after {
		if strings.HasPrefix(filepath.Base(f), "cni-") && !slices.Contains(before, f) {
			pods = append(pods, f)
		}
	}
	return pods
}

// processesIn lists the processes in network namespace ns.
func processesIn(ns string) []int {
	var want syscall.Stat_t
	if err := syscall.Stat("/run/netns/"+ns, &want); err != nil {
		return nil
	}
	link := "net:[" + strconv.FormatUint(want.Ino, 10) + "]"
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if got, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "net")); err == nil && got == link {
			pids = append(pids, pid)
		}
	}
	return pids
}
