package cli

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/svm-project/svm/internal/migrator"
)

func TestPrintSummary(t *testing.T) {
	tests := []struct {
		name string
		res  migrator.Result
		want string
	}{
		{
			name: "every object rewritten",
			res:  migrator.Result{State: migrator.State{Progress: migrator.Progress{Listed: 10, Rewritten: 10}}},
			want: "widgets.example.com: rewritten 10, skipped 0, failed 0 in 1.5s\n",
		},
		{
			name: "skipped, some without a write",
			res:  migrator.Result{State: migrator.State{Progress: migrator.Progress{Listed: 10, Rewritten: 6, Skipped: 4, SkippedWithoutWrite: 3}}},
			want: "widgets.example.com: rewritten 6, skipped 4, failed 0 in 1.5s\n" +
				"  skipped without a write (written or deleted since the start): 3; on conflict or not found: 1\n",
		},
		{
			name: "failed, more than are named",
			res: migrator.Result{State: migrator.State{
				Progress:      migrator.Progress{Listed: 10, Rewritten: 7, Failed: 3},
				FailedObjects: []migrator.FailedObject{{Namespace: "ns", Name: "w-1", Reason: "denied"}, {Name: "w-2", Reason: "denied"}},
			}},
			want: "widgets.example.com: rewritten 7, skipped 0, failed 3 in 1.5s\n" +
				"  failed ns/w-1: denied\n  failed w-2: denied\n  ... and 1 more\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			printSummary(&out, "widgets.example.com", tt.res, 1500*time.Millisecond)
			if diff := cmp.Diff(tt.want, out.String()); diff != "" {
				t.Errorf("summary (-want +got):\n%s", diff)
			}
		})
	}
}
