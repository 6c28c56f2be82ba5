package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// What a kubelet changes outside the namespaces the node runs in, and what
// hack/e2e checks it put back.
var (
	// kubeletSysctls are the sysctls a kubelet sets on start.
	kubeletSysctls = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"}
	// hostDirs are directories a kubelet, containerd or the CNI plugins
	// create whatever their configuration says.
	hostDirs = []string{"/var/lib/kubelet", "/var/lib/cni", "/run/containerd", "/etc/cni", "/opt/cni"}
)

// hostState is what hack/e2e compares before and after: the sysctls, the
// machine's iptables rules, network interfaces and mounts, which of
// hostDirs exist, and the kubelet's cgroups.
type hostState struct {
	sysctls  map[string]string
	iptables string
	links    []string
	mounts   []string
	dirs     []string
	cgroups  []string
	netns    []string
}

func readHost() (hostState, error) {
	h := hostState{sysctls: map[string]string{}}
	for _, name := range kubeletSysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", name))
		if err != nil {
			return h, err
		}
		h.sysctls[name] = strings.TrimSpace(string(v))
	}
	rules, err := exec.Command("iptables-save").Output()
	if err != nil {
		return h, fmt.Errorf("iptables-save: %w", err)
	}
	h.iptables = withoutCounters(rules)
	links, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		return h, fmt.Errorf("ip link: %w", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(links)), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			h.links = append(h.links, strings.TrimSuffix(f[1], ":"))
		}
	}
	mountinfo, err := os.ReadFile("/proc/1/mountinfo")
	if err != nil {
		return h, err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(mountinfo)), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			h.mounts = append(h.mounts, f[4])
		}
	}
	for _, d := range hostDirs {
		if _, err := os.Stat(d); err == nil {
			h.dirs = append(h.dirs, d)
		}
	}
	h.cgroups, _ = filepath.Glob("/sys/fs/cgroup/*/kubepods")
	// Pods' network namespaces are files containerd makes in /run/netns.
	h.netns, _ = filepath.Glob("/run/netns/*")
	slices.Sort(h.links)
	slices.Sort(h.mounts)
	return h, nil
}

// withoutCounters drops iptables-save's comments and packet counters,
// which change with the machine's traffic.
func withoutCounters(rules []byte) string {
	var out []string
	for _, line := range bytes.Split(rules, []byte("\n")) {
		s := string(line)
		switch {
		case strings.HasPrefix(s, "#"):
			continue
		case strings.HasPrefix(s, ":"):
			if i := strings.LastIndex(s, " ["); i > 0 {
				s = s[:i]
			}
		}
		out = append(out, s)
	}
	return strings.Join(out, "\n")
}

// differences says how after differs from before, one line each.
func differences(before, after hostState) []string {
	var diffs []string
	for name, v := range before.sysctls {
		if after.sysctls[name] != v {
			diffs = append(diffs, fmt.Sprintf("sysctl %s is %s, was %s", name, after.sysctls[name], v))
		}
	}
	if before.iptables != after.iptables {
		diffs = append(diffs, "the machine's iptables rules changed:\n"+after.iptables)
	}
	for _, c := range []struct {
		what          string
		before, after []string
	}{
		{"network interfaces", before.links, after.links},
		{"mounts", before.mounts, after.mounts},
		{"directories", before.dirs, after.dirs},
		{"kubelet cgroups", before.cgroups, after.cgroups},
		{"network namespaces", before.netns, after.netns},
	} {
		if !slices.Equal(c.before, c.after) {
			diffs = append(diffs, fmt.Sprintf("%s: %v, were %v", c.what, c.after, c.before))
		}
	}
	return diffs
}
