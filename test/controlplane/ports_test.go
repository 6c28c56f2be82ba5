package controlplane

import (
	"net"
	"strconv"
	"testing"
)

func TestFreePorts(t *testing.T) {
	ports, err := FreePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p < lowestPort || p >= highestPort || seen[p] {
			t.Errorf("port %d: want distinct ports in [%d, %d), below the ephemeral range", p, lowestPort, highestPort)
		}
		seen[p] = true
		// Free now: a server can bind it.
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Errorf("port %d is not free: %v", p, err)
			continue
		}
		l.Close()
	}
	if len(ports) != 5 {
		t.Errorf("%d ports, want 5", len(ports))
	}
}
