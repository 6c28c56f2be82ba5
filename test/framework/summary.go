package framework

import (
	"fmt"
	"testing"
)

// Scenario is the outcome of one reliability scenario, as the test log
// reports it: how many objects, how many writes and retries it took, and
// whether etcd and the objects' contents were verified afterwards.
type Scenario struct {
	Name     string
	Objects  int
	Writes   int // PATCH requests the API server counted for the resource, or -1 when not measured
	Retries  int // requests svm had to repeat, or -1 when not measured
	Verified bool
}

// String is the summary line: one per scenario, in one format, so a CI log
// can be read (and grepped) at a glance.
func (s Scenario) String() string {
	verified := "no"
	if s.Verified {
		verified = "yes"
	}
	return fmt.Sprintf("SCENARIO %-40s objects=%d writes=%s retries=%s verified=%s", s.Name, s.Objects, measured(s.Writes), measured(s.Retries), verified)
}

// Report logs the scenario's summary line; Verified must be set only after
// the checks it stands for have passed.
func (s Scenario) Report(t testing.TB) {
	t.Helper()
	t.Log(s.String())
}

// measured prints a count, or n/a for one not measured (negative).
func measured(n int) string {
	if n < 0 {
		return "n/a"
	}
	return fmt.Sprint(n)
}
