package framework

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
)

// modulePath is the import path prefix of svm's own packages.
const modulePath = "github.com/svm-project/svm/"

// goroutineDumpStart matches the line with which the Go runtime begins the
// dump it writes on SIGQUIT.
var goroutineDumpStart = regexp.MustCompile(`(?m)^SIGQUIT: quit$`)

// splitGoroutineDump splits a Go program's log into what it wrote itself
// and the goroutine dump the runtime appended on SIGQUIT, if any.
func splitGoroutineDump(data []byte) (log, dump []byte) {
	loc := goroutineDumpStart.FindIndex(data)
	if loc == nil {
		return data, nil
	}
	return data[:loc[0]], data[loc[0]:]
}

// summarizeGoroutines lists, for each goroutine of a dump that runs
// svm's own code, its state and the innermost of svm's frames, folding
// identical lines into one with a count: a few lines that say where a
// stalled program waits, instead of thousands of frames.
func summarizeGoroutines(dump []byte, prefix string) string {
	var order []string
	counts := map[string]int{}
	for _, block := range bytes.Split(dump, []byte("\n\n")) {
		lines := strings.Split(strings.TrimSpace(string(block)), "\n")
		if len(lines) < 2 || !strings.HasPrefix(lines[0], "goroutine ") {
			continue
		}
		state := lines[0]
		if i, j := strings.Index(state, "["), strings.LastIndex(state, "]"); i >= 0 && j > i {
			state = state[i : j+1]
		}
		for k := 1; k+1 < len(lines); k += 2 {
			fn := strings.TrimSpace(lines[k])
			if !strings.HasPrefix(fn, prefix) {
				continue
			}
			fn = strings.TrimPrefix(fn, prefix)
			if i := strings.LastIndex(fn, "("); i > 0 {
				fn = fn[:i]
			}
			where := strings.TrimSpace(lines[k+1])
			if i := strings.LastIndex(where, " +0x"); i > 0 {
				where = where[:i]
			}
			line := fmt.Sprintf("%s %s at %s", state, fn, where)
			if counts[line] == 0 {
				order = append(order, line)
			}
			counts[line]++
			break
		}
	}
	if len(order) == 0 {
		return "(none)"
	}
	var b strings.Builder
	for _, line := range order {
		fmt.Fprintf(&b, "%4d × %s\n", counts[line], line)
	}
	return strings.TrimRight(b.String(), "\n")
}
