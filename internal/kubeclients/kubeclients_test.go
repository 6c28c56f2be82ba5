package kubeclients

import (
	"testing"

	"k8s.io/client-go/rest"
)

// TestNewBuildsItsDiscoveryClientsAndCountsThem: a Set builds two
// discovery clients, Discovery and BulkDiscovery, each with its own rate
// limit, both reading the per-group-version documents.
func TestNewBuildsItsDiscoveryClientsAndCountsThem(t *testing.T) {
	setsBefore, discoveryBefore := Built()
	s, err := New(&rest.Config{Host: "https://127.0.0.1:6443"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Discovery == nil || s.Kube == nil || s.Dynamic == nil || s.Metadata == nil || s.CRDs == nil || s.Servers == nil {
		t.Fatalf("New left a client unbuilt: %+v", s)
	}
	if s.BulkDiscovery == nil || s.BulkDiscovery == s.Discovery {
		t.Error("New built no BulkDiscovery of its own")
	}
	if !s.Discovery.UseLegacyDiscovery || !s.BulkDiscovery.UseLegacyDiscovery {
		t.Error("the discovery client reads the aggregated document, which carries no storageVersionHash")
	}
	sets, discoveries := Built()
	if sets-setsBefore != 1 || discoveries-discoveryBefore != 2 {
		t.Errorf("New counted %d sets and %d discovery clients, want 1 and 2", sets-setsBefore, discoveries-discoveryBefore)
	}
}

func TestEndpointsBuildOneClientPerAddress(t *testing.T) {
	e := NewEndpoints(&rest.Config{Host: "https://127.0.0.1:6443"})
	if e.Host() != "https://127.0.0.1:6443" {
		t.Errorf("Host() = %q, want the configuration's", e.Host())
	}
	a1, err := e.For("https://10.0.0.1:6443")
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := e.For("https://10.0.0.1:6443")
	b, _ := e.For("https://10.0.0.2:6443")
	if a1 != a2 {
		t.Error("a second client was built for the same address")
	}
	if a1 == b {
		t.Error("two addresses share one client")
	}
	if got := b.Get().AbsPath("/metrics").URL().Host; got != "10.0.0.2:6443" {
		t.Errorf("the client of https://10.0.0.2:6443 reaches %s", got)
	}
}
