package controlplane

import (
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
)

// The ports servers listen on are picked below the kernel's ephemeral
// range (32768-60999 by default on Linux). A port the kernel hands out
// for a listener on port 0 is an ephemeral one: between the check and the
// server's bind, any outgoing connection on the machine (a test's client,
// an API server's etcd client) may take it as its local port, and the
// server then fails to start. Ports below the range are only ever taken
// by listeners.
const (
	lowestPort  = 15000
	highestPort = 32000
)

// A port that is free now may still be on its way to a server of another
// test process: picked a moment ago, not yet bound (an API server binds
// seconds after it starts), or between a stop and a restart. Every port
// handed out is therefore also reserved, with an exclusive lock on a file
// named after it, which every test process of the machine respects and
// the kernel drops when the holder exits, however it exits.
var reservationDir = filepath.Join(os.TempDir(), "svm-ports-"+strconv.Itoa(os.Getuid()))

// makeReservationDir creates reservationDir, once per process.
var makeReservationDir = sync.OnceValue(func() error { return os.MkdirAll(reservationDir, 0o700) })

// forTheProcess keeps the reservations of FreePorts referenced: a file the
// garbage collector finalizes is closed, and its lock with it.
var forTheProcess struct {
	sync.Mutex
	reserved []*os.File
}

// reservePort takes port's reservation, or reports false when another
// holder (another process, or another control plane of this one) has it.
func reservePort(port int) (*os.File, bool, error) {
	if err := makeReservationDir(); err != nil {
		return nil, false, fmt.Errorf("create port reservation directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(reservationDir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("open port reservation: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("lock port reservation: %w", err)
	}
	return f, true, nil
}

// releasePorts gives reservations back.
func releasePorts(reserved []*os.File) {
	for _, f := range reserved {
		f.Close() // closing the only descriptor drops the lock
	}
}

// freePorts finds n distinct free loopback ports and keeps them reserved
// until the control plane stops.
func (cp *ControlPlane) freePorts(n int) ([]int, error) {
	ports, reserved, err := reserveFreePorts(n)
	if err != nil {
		return nil, err
	}
	cp.portsMu.Lock()
	cp.reserved = append(cp.reserved, reserved...)
	cp.portsMu.Unlock()
	return ports, nil
}

// FreePorts finds n distinct free loopback ports for servers, reserved for
// as long as the test process runs; tests use it for the endpoints of the
// processes they start.
func FreePorts(n int) ([]int, error) {
	ports, reserved, err := reserveFreePorts(n)
	if err != nil {
		return nil, err
	}
	forTheProcess.Lock()
	forTheProcess.reserved = append(forTheProcess.reserved, reserved...)
	forTheProcess.Unlock()
	return ports, nil
}

// reserveFreePorts picks n distinct ports below the ephemeral range, at
// random so that parallel tests rarely try the same, each unreserved and
// free now, and returns them with their reservations.
func reserveFreePorts(n int) ([]int, []*os.File, error) {
	ports := make([]int, 0, n)
	reserved := make([]*os.File, 0, n)
	for attempt := 0; len(ports) < n; attempt++ {
		if attempt >= 100*n {
			releasePorts(reserved)
			return nil, nil, fmt.Errorf("find %d free ports between %d and %d: %d found in %d attempts", n, lowestPort, highestPort, len(ports), attempt)
		}
		port := lowestPort + mathrand.IntN(highestPort-lowestPort)
		f, ok, err := reservePort(port)
		if err != nil {
			releasePorts(reserved)
			return nil, nil, err
		}
		if !ok {
			continue // on its way to another server
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			f.Close()
			continue // taken by a listener that reserves nothing
		}
		l.Close()
		ports = append(ports, port)
		reserved = append(reserved, f)
	}
	return ports, reserved, nil
}
