package framework

import (
	"fmt"
	"os"
	"strings"
)

// PeakRSS is the peak resident set of process pid in bytes (VmHWM, which
// exec resets), 0 once the process is gone: what a test bounds svm's
// memory by.
func PeakRSS(pid int) int64 { return procStatus(pid, "VmHWM:") }

// RSS is the resident set of process pid in bytes, 0 once it is gone.
func RSS(pid int) int64 { return procStatus(pid, "VmRSS:") }

// procStatus is the field of /proc/<pid>/status given in kB, in bytes.
func procStatus(pid int, field string) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(data)) {
		if rest, ok := strings.CutPrefix(line, field); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%d kB", &kb); err == nil {
				return kb * 1024
			}
		}
	}
	return 0
}
