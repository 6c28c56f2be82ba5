package migrator

import (
	"testing"

	"github.com/svm-project/svm/internal/managedfields"
)

func TestOutcomesSayWhatWasLeft(t *testing.T) {
	tests := []struct {
		name string
		p    Progress
		want string
	}{{
		name: "nothing moved",
		p:    Progress{Listed: 2, Restored: 2},
		want: "migrated 2 (re-stored 2, already current 0), written since the start 0, gone 0, failed 0",
	}, {
		name: "every entry moved",
		p:    Progress{Listed: 2, Restored: 2, ManagedFieldsRewritten: 2},
		want: "migrated 2 (re-stored 2, already current 0), written since the start 0, gone 0, failed 0; managedFields moved off the retired versions on 2 objects",
	}, {
		name: "entries left, by reason",
		p: Progress{Listed: 3, Restored: 3, ManagedFieldsRewritten: 1,
			ManagedFieldsLeft: map[managedfields.Reason]int64{managedfields.Unplaced: 1, managedfields.NotConverted: 2}},
		want: "migrated 3 (re-stored 3, already current 0), written since the start 0, gone 0, failed 0; managedFields moved off the retired versions on 1 objects, " +
			"entries left naming a retired version 3 (NotConverted 2, Unplaced 1)",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Outcomes(); got != tt.want {
				t.Errorf("Outcomes =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}
