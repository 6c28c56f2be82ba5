package main

import (
	"slices"
	"strings"
	"testing"
)

func TestDifferencesNameWhatChanged(t *testing.T) {
	before := hostState{
		sysctls:  map[string]string{"vm/overcommit_memory": "0", "kernel/panic": "1"},
		iptables: "*filter\n:INPUT ACCEPT\nCOMMIT",
		links:    []string{"eth0", "lo"},
		mounts:   []string{"/", "/proc"},
		dirs:     []string{"/etc/cni"},
	}
	if d := differences(before, before); len(d) != 0 {
		t.Fatalf("the same state differs: %v", d)
	}
	after := hostState{
		sysctls:  map[string]string{"vm/overcommit_memory": "1", "kernel/panic": "1"},
		iptables: "*filter\n:INPUT ACCEPT\n:KUBE-FIREWALL\nCOMMIT",
		links:    []string{"eth0", "lo", "svme2e0"},
		mounts:   []string{"/", "/proc"},
		dirs:     []string{"/etc/cni", "/var/lib/kubelet"},
		cgroups:  []string{"/sys/fs/cgroup/memory/kubepods"},
		netns:    []string{"/run/netns/cni-1"},
	}
	got := strings.Join(differences(before, after), "\n")
	for _, want := range []string{"sysctl vm/overcommit_memory is 1, was 0", "KUBE-FIREWALL", "network interfaces", "directories",
		"kubelet cgroups", "network namespaces"} {
		if !strings.Contains(got, want) {
			t.Errorf("differences do not say %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "mounts") || strings.Contains(got, "kernel/panic") {
		t.Errorf("differences name what did not change:\n%s", got)
	}
}

func TestWithoutCountersKeepsTheRules(t *testing.T) {
	a := withoutCounters([]byte("# Generated at 10:00\n*filter\n:INPUT ACCEPT [10:200]\n-A INPUT -j DROP\nCOMMIT\n# Completed"))
	b := withoutCounters([]byte("# Generated at 11:00\n*filter\n:INPUT ACCEPT [99:9999]\n-A INPUT -j DROP\nCOMMIT\n# Completed"))
	if a != b {
		t.Errorf("the same rules with other counters differ:\n%s\n%s", a, b)
	}
	if c := withoutCounters([]byte("*filter\n:INPUT ACCEPT [1:1]\n-A INPUT -j ACCEPT\nCOMMIT")); c == a {
		t.Errorf("other rules read the same: %s", c)
	}
}

func TestPodNetnsAreOnlyContainerdsNew(t *testing.T) {
	before := []string{"/run/netns/cni-old", "/run/netns/mine"}
	after := []string{"/run/netns/cni-old", "/run/netns/cni-1234", "/run/netns/mine", "/run/netns/theirs", "/run/netns/svm-e2e-7"}
	if got := podNetns(before, after); !slices.Equal(got, []string{"/run/netns/cni-1234"}) {
		t.Errorf("pod network namespaces to remove: %v, want only the new cni- one", got)
	}
}
