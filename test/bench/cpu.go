package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat times;
// it is 100 on every Linux architecture Go supports.
const clockTicks = 100

// processCPU returns the user+system CPU time pid has used.
func processCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may contain spaces; fields after it are
	// space separated, utime and stime being the 14th and 15th overall.
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, err := strconv.ParseInt(fields[11], 10, 64)
	if err != nil {
		return 0, err
	}
	stime, err := strconv.ParseInt(fields[12], 10, 64)
	if err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// cpuMeter measures a process's CPU over an interval, minus what it burns
// when idle over the same wall time, so that slow runs do not look
// expensive only because the server's background work ran longer.
type cpuMeter struct {
	pid       int
	idleRate  float64 // CPU seconds per wall second when idle
	startCPU  time.Duration
	startWall time.Time
}

func newCPUMeter(pid int, idleSample time.Duration) (*cpuMeter, error) {
	c0, err := processCPU(pid)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	time.Sleep(idleSample)
	c1, err := processCPU(pid)
	if err != nil {
		return nil, err
	}
	return &cpuMeter{pid: pid, idleRate: (c1 - c0).Seconds() / time.Since(t0).Seconds()}, nil
}

func (m *cpuMeter) start() error {
	c, err := processCPU(m.pid)
	m.startCPU, m.startWall = c, time.Now()
	return err
}

// stop returns the CPU used since start, less the idle share, and the wall time.
func (m *cpuMeter) stop() (busy, wall time.Duration, err error) {
	c, err := processCPU(m.pid)
	if err != nil {
		return 0, 0, err
	}
	wall = time.Since(m.startWall)
	used := (c - m.startCPU).Seconds() - m.idleRate*wall.Seconds()
	return time.Duration(max(used, 0) * float64(time.Second)), wall, nil
}
