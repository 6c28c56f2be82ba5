package migration

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// decisionTest is one case of a pure decision's table: its input, and
// what the decision must make of it.
type decisionTest[In, Out any] struct {
	name string
	in   In
	want Out
}

// checkDecisions runs decide on every case's input, each as a subtest,
// and compares what it decides with the case's want.
func checkDecisions[In, Out any](t *testing.T, decide func(In) Out, tests []decisionTest[In, Out]) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, decide(tt.in)); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
		})
	}
}
