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

func TestAReservedPortIsNotPickedAgain(t *testing.T) {
	ports, err := FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	// Another holder (another open file, as another test process would
	// have) cannot take it while this process runs.
	if f, ok, err := reservePort(ports[0]); err != nil || ok {
		if f != nil {
			f.Close()
		}
		t.Fatalf("port %d reserved twice (err %v)", ports[0], err)
	}

	cp := &ControlPlane{}
	picked, err := cp.freePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range picked {
		if f, ok, _ := reservePort(p); ok {
			f.Close()
			t.Errorf("port %d of a running control plane is not reserved", p)
		}
	}
	cp.cleanup()
	for _, p := range picked {
		f, ok, err := reservePort(p)
		if err != nil || !ok {
			t.Errorf("port %d still reserved after the control plane stopped (err %v)", p, err)
			continue
		}
		f.Close()
	}
}
