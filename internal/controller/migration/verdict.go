package migration

import "github.com/svm-project/svm/internal/fingerprint"

// GuardInput is everything Judge decides from.
type GuardInput struct {
	// After says the objects have been rewritten: the guard is read to
	// tell whether the migration is done. Otherwise it is read before
	// they are, to tell whether the migration may go on.
	After bool
	// Saved is the fingerprint saved in the migration's status when it
	// started, "" when none was.
	Saved string
	// Now is the fingerprint read now.
	Now Fingerprint
}

// GuardAction is what a migration does about its resource's storage
// version.
type GuardAction int

const (
	// GuardGoOn: rewrite the objects, or, after they were, succeed.
	GuardGoOn GuardAction = iota
	// GuardWait: API servers disagree on the storage version; the
	// migration stays Running and is tried again after a backoff.
	GuardWait
	// GuardStartOver: the storage version may have changed since the
	// migration started; its progress is forgotten.
	GuardStartOver
)

// GuardVerdict is what Judge decides.
type GuardVerdict struct {
	Action GuardAction
	// Fingerprint is what the migration's status keeps as its starting
	// point from now on.
	Fingerprint string
	// Why says why the migration waits or starts over, "" when it goes
	// on.
	Why string
}

// Judge decides what a migration does about its resource's storage
// version. Before the objects are rewritten, it waits while API servers
// disagree (whatever is rewritten then, a server still on the old version
// may write back in it), records the fingerprint on its first run, and
// starts over, from the fingerprint now, when the storage version may
// have changed while it was stopped: what it rewrote before may be in the
// old one. After they were rewritten, done means done only if the storage
// version did not change meanwhile; otherwise, or if servers disagree by
// then, it starts over with no fingerprint, to be read afresh when it runs
// again.
func Judge(in GuardInput) GuardVerdict {
	if in.After {
		switch {
		case in.Now.Disagreement != "":
			return GuardVerdict{Action: GuardStartOver, Why: in.Now.Disagreement}
		case !fingerprint.SameStorage(in.Saved, in.Now.Value):
			return GuardVerdict{Action: GuardStartOver, Why: "the storage version may have changed while the migration ran"}
		}
		return GuardVerdict{Action: GuardGoOn, Fingerprint: in.Saved}
	}
	switch {
	case in.Now.Disagreement != "":
		return GuardVerdict{Action: GuardWait, Fingerprint: in.Saved, Why: in.Now.Disagreement}
	case in.Saved == "":
		return GuardVerdict{Action: GuardGoOn, Fingerprint: in.Now.Value}
	case !fingerprint.SameStorage(in.Saved, in.Now.Value):
		return GuardVerdict{Action: GuardStartOver, Fingerprint: in.Now.Value, Why: "The storage version may have changed since the migration started"}
	}
	return GuardVerdict{Action: GuardGoOn, Fingerprint: in.Saved}
}
