package migration

import "testing"

const disagree = "API servers encode widgets.example.com in different versions: v1 (a), v2 (b)"

type judgeTest = decisionTest[GuardInput, GuardVerdict]

// TestJudgeBefore reads the guard as a run starts: whether it may rewrite
// the objects, and from which starting point.
func TestJudgeBefore(t *testing.T) {
	checkDecisions(t, Judge, []judgeTest{
		{
			name: "first run: the fingerprint now is the starting point",
			in:   GuardInput{Now: Fingerprint{Value: "crd=1/v2"}},
			want: GuardVerdict{Action: GuardGoOn, Fingerprint: "crd=1/v2"},
		},
		{
			name: "first run with discovery alone: nothing to record",
			in:   GuardInput{},
			want: GuardVerdict{Action: GuardGoOn},
		},
		{
			name: "resuming on the same storage version",
			in:   GuardInput{Saved: "crd=1/v2,storageversion=10", Now: Fingerprint{Value: "crd=1/v2,storageversion=10"}},
			want: GuardVerdict{Action: GuardGoOn, Fingerprint: "crd=1/v2,storageversion=10"},
		},
		{
			name: "the CRD deleted while stopped: the saved starting point stays",
			in:   GuardInput{Saved: "crd=1/v2,storageversion=10", Now: Fingerprint{Value: "storageversion=10"}},
			want: GuardVerdict{Action: GuardGoOn, Fingerprint: "crd=1/v2,storageversion=10"},
		},
		{
			name: "servers disagree: wait, keeping the starting point",
			in:   GuardInput{Saved: "storageversion=10", Now: Fingerprint{Value: "storageversion=11", Disagreement: disagree}},
			want: GuardVerdict{Action: GuardWait, Fingerprint: "storageversion=10", Why: disagree},
		},
		{
			name: "servers disagree on a first run: wait before recording anything",
			in:   GuardInput{Now: Fingerprint{Value: "storageversion=11", Disagreement: disagree}},
			want: GuardVerdict{Action: GuardWait, Why: disagree},
		},
		{
			name: "resuming after spec changes that left the storage version alone, every generation seen",
			in:   GuardInput{Saved: "crd=u1/3..5/v2", Now: Fingerprint{Value: "crd=u1/3..7/v2"}},
			want: GuardVerdict{Action: GuardGoOn, Fingerprint: "crd=u1/3..5/v2"},
		},
		{
			name: "changed while stopped: start over from the fingerprint now",
			in:   GuardInput{Saved: "crd=1/v1", Now: Fingerprint{Value: "crd=2/v2"}},
			want: GuardVerdict{Action: GuardStartOver, Fingerprint: "crd=2/v2", Why: "The storage version may have changed since the migration started"},
		},
	})
}

// TestJudgeAfter reads the guard once every object was rewritten: whether
// the migration is done.
func TestJudgeAfter(t *testing.T) {
	checkDecisions(t, Judge, []judgeTest{
		{
			name: "unchanged: done",
			in:   GuardInput{After: true, Saved: "storageversion=10", Now: Fingerprint{Value: "storageversion=10"}},
			want: GuardVerdict{Action: GuardGoOn, Fingerprint: "storageversion=10"},
		},
		{
			name: "the CRD deleted meanwhile: done",
			in:   GuardInput{After: true, Saved: "crd=1/v2", Now: Fingerprint{}},
			want: GuardVerdict{Action: GuardGoOn, Fingerprint: "crd=1/v2"},
		},
		{
			name: "changed while running: start over, to read the fingerprint afresh",
			in:   GuardInput{After: true, Saved: "storageversion=10", Now: Fingerprint{Value: "storageversion=11"}},
			want: GuardVerdict{Action: GuardStartOver, Why: "the storage version may have changed while the migration ran"},
		},
		{
			name: "servers disagree: start over rather than wait",
			in:   GuardInput{After: true, Saved: "storageversion=10", Now: Fingerprint{Value: "storageversion=10", Disagreement: disagree}},
			want: GuardVerdict{Action: GuardStartOver, Why: disagree},
		},
		{
			name: "the CRD's spec changed while running, its storage version did not, every generation seen: done",
			in:   GuardInput{After: true, Saved: "crd=u1/3..5/v2", Now: Fingerprint{Value: "crd=u1/3..9/v2"}},
			want: GuardVerdict{Action: GuardGoOn, Fingerprint: "crd=u1/3..5/v2"},
		},
		{
			name: "one spec change while running, seen by no other read: done, one change cannot flip and flip back",
			in:   GuardInput{After: true, Saved: "crd=u1/5/v2", Now: Fingerprint{Value: "crd=u1/6/v2"}},
			want: GuardVerdict{Action: GuardGoOn, Fingerprint: "crd=u1/5/v2"},
		},
		{
			name: "generations unseen while running, the storage version the same: start over, they may have hidden a flip and a flip back",
			in:   GuardInput{After: true, Saved: "crd=u1/3..5/v2", Now: Fingerprint{Value: "crd=u1/8/v2"}},
			want: GuardVerdict{Action: GuardStartOver, Why: "the storage version may have changed while the migration ran"},
		},
		{
			name: "a CRD appeared while running: start over",
			in:   GuardInput{After: true, Now: Fingerprint{Value: "crd=1/v1"}},
			want: GuardVerdict{Action: GuardStartOver, Why: "the storage version may have changed while the migration ran"},
		},
	})
}
