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

// quietRate is the API server's CPU, in cores, below which it counts as
// settled: its background work on an idle control plane stays under it
// (0.02-0.08 of a core here), and the work a pass or a storage flip leaves
// behind (the watch cache decoding the last writes, a new CRD storage
// filling its cache, a restarted server listing everything) is several
// times more.
const quietRate = 0.1

// settle waits until pid's CPU over a second stays below quietRate twice in
// a row, or until limit has passed, and returns how long it waited.
func settle(pid int, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	quiet := 0
	for quiet < 2 && time.Since(start) < limit {
		c0, err := processCPU(pid)
		if err != nil {
			return 0, err
		}
		t0 := time.Now()
		time.Sleep(time.Second)
		c1, err := processCPU(pid)
		if err != nil {
			return 0, err
		}
		if (c1-c0).Seconds()/time.Since(t0).Seconds() < quietRate {
			quiet++
		} else {
			quiet = 0
		}
	}
	return time.Since(start), nil
}

// cpuMeter measures a process's CPU over an interval, minus what it burns
// when idle over the same wall time, so that slow runs do not look
// expensive only because the server's background work ran longer. Start it
// on a settled server: an idle sample taken while the server still works
// off an earlier pass would count that work as idle, and subtract it.
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

// stop returns the CPU used since start, less the idle share over the same
// wall time. Call it once the server has settled, so that the work the
// pass left behind is the pass's.
func (m *cpuMeter) stop() (busy time.Duration, err error) {
	c, err := processCPU(m.pid)
	if err != nil {
		return 0, err
	}
	wall := time.Since(m.startWall)
	used := (c - m.startCPU).Seconds() - m.idleRate*wall.Seconds()
	return time.Duration(max(used, 0) * float64(time.Second)), nil
}
