package migrator

import (
	"strings"
	"testing"

	"github.com/svm-project/svm/internal/managedfields"
)

func TestOutcomesSayWhatWasLeft(t *testing.T) {
	tests := []struct {
		name string
		c    Counts
		want string
	}{{
		name: "nothing moved",
		c:    Counts{Listed: 2, Restored: 2},
		want: "migrated 2 (re-stored 2, already current 0), written since the start 0, gone 0, failed 0",
	}, {
		name: "every entry moved",
		c:    Counts{Listed: 2, Restored: 2, ManagedFieldsRewritten: 2},
		want: "migrated 2 (re-stored 2, already current 0), written since the start 0, gone 0, failed 0; managedFields moved off the retired versions on 2 objects",
	}, {
		name: "entries left, by reason",
		c: Counts{Listed: 3, Restored: 3, ManagedFieldsRewritten: 1,
			ManagedFieldsLeft: LeftCounts{Unplaced: 1, NotConverted: 2}},
		want: "migrated 3 (re-stored 3, already current 0), written since the start 0, gone 0, failed 0; managedFields moved off the retired versions on 1 objects, " +
			"entries left naming a retired version 3 (NotConverted 2, Unplaced 1)",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.c.Outcomes(); got != tt.want {
				t.Errorf("Outcomes =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestLeftCountsCountEveryReason(t *testing.T) {
	var l LeftCounts
	for _, r := range []managedfields.Reason{managedfields.NotInVersion, managedfields.NotServed, managedfields.NotConverted,
		managedfields.NotConverted, managedfields.Refused, managedfields.Unplaced, managedfields.Denied, "SomethingNew"} {
		l.Add(r, 1)
	}
	if want := (LeftCounts{NotInVersion: 1, NotServed: 1, NotConverted: 2, Refused: 1, Unplaced: 2, Denied: 1}); l != want {
		t.Errorf("LeftCounts = %+v, want %+v (a reason not known counted as Unplaced)", l, want)
	}
	if got, want := l.Total(), int64(8); got != want {
		t.Errorf("Total = %d, want %d", got, want)
	}
	if got, want := l.String(), "NotInVersion 1, NotServed 1, NotConverted 2, Refused 1, Unplaced 2, Denied 1"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}

func TestCountsSum(t *testing.T) {
	c := Counts{Listed: 21, Restored: 10, AlreadyCurrent: 5, WrittenSinceStart: 3, Gone: 2, Failed: 1, SkippedWithoutWrite: 4}
	if got := c.Migrated(); got != 15 {
		t.Errorf("Migrated = %d, want 15", got)
	}
	if got := c.Handled(); got != 21 {
		t.Errorf("Handled = %d, want 21", got)
	}
	if got, want := c.Outcomes(), "migrated 15 (re-stored 10, already current 5), written since the start 3, gone 2, failed 1"; got != want {
		t.Errorf("Outcomes = %q, want %q", got, want)
	}
	// Entries left are counted by reason, and said so.
	c.ManagedFieldsRewritten = 4
	c.ManagedFieldsLeft = LeftCounts{Refused: 1, NotConverted: 2}
	if !strings.HasSuffix(c.Outcomes(), "; managedFields moved off the retired versions on 4 objects, entries left naming a retired version 3 (NotConverted 2, Refused 1)") {
		t.Errorf("Outcomes = %q, does not say what was left", c.Outcomes())
	}
}
