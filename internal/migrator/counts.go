package migrator

import (
	"fmt"
	"strings"

	"github.com/svm-project/svm/internal/managedfields"
)

// Counts says where a migration's listed objects went: each ends in
// exactly one of Restored, AlreadyCurrent, WrittenSinceStart,
// WrittenSinceChange, Gone, Failed and NothingToRewrite. It is the one
// home of svm's counters: the engine counts in it, and every command,
// controller status and pkg/migrate report it as it is.
type Counts struct {
	// Listed counts the objects listed.
	Listed int64
	// Restored counts objects svm wrote and the API server stored anew:
	// its answer carried another resourceVersion than the one listed, so
	// new bytes went to etcd (the storage version or the encryption key
	// had changed, or the object needed re-encoding).
	Restored int64
	// AlreadyCurrent counts objects svm wrote that the API server left as
	// they were: its answer carried the listed resourceVersion, because
	// the bytes it would store were the stored ones.
	AlreadyCurrent int64
	// WrittenSinceStart counts objects svm did not need to write: written
	// after the migration started, so stored in the current form already,
	// by another client or by this migration before it was interrupted
	// (found newer than the checkpoint, by the watch, or by a write
	// answered with a conflict).
	WrittenSinceStart int64
	// WrittenSinceChange counts objects svm did not need to write
	// because they were written after Request.StoredSince, before the
	// migration started: the target is what they are stored in. None
	// cost a request.
	WrittenSinceChange int64
	// Gone counts objects deleted after they were listed (found by the
	// watch, or by a write answered with not found).
	Gone int64
	// Failed counts objects that could not be written.
	Failed int64
	// NothingToRewrite counts objects a run with ManagedFields.Only left
	// alone: their managedFields named no retired version, and their
	// bytes were not to be rewritten.
	NothingToRewrite int64
	// SkippedWithoutWrite is the part of WrittenSinceStart,
	// WrittenSinceChange and Gone that cost no request.
	SkippedWithoutWrite int64
	// ManagedFieldsRewritten counts the objects whose managedFields svm
	// moved off retired versions (Request.ManagedFields); each is also
	// counted as Restored.
	ManagedFieldsRewritten int64
	// ThroughStatus counts the objects svm wrote through their status
	// subresource after an admission webhook or policy refused their own
	// write (Request.ThroughStatus); each is also counted in Restored or
	// AlreadyCurrent.
	ThroughStatus int64
	// ManagedFieldsLeft counts, by why, the entries svm left naming a
	// retired version because their fields could not be placed in the
	// target version. No manager loses a field: such an entry stays as it
	// was (Result.LeftEntries names them).
	ManagedFieldsLeft LeftCounts
}

// Migrated counts the objects that are in the current form because svm
// wrote them: re-stored or already current.
func (c Counts) Migrated() int64 { return c.Restored + c.AlreadyCurrent }

// Skipped counts the objects svm did not need to write.
func (c Counts) Skipped() int64 { return c.WrittenSinceStart + c.WrittenSinceChange + c.Gone }

// Handled counts the listed objects whose outcome is known.
func (c Counts) Handled() int64 {
	return c.Migrated() + c.Skipped() + c.Failed + c.NothingToRewrite
}

// Outcomes says where the objects went, in the words svm uses for them
// everywhere: the CLI's summaries, the Succeeded condition and its event,
// pkg/migrate. What only some runs do is said when a run did it.
func (c Counts) Outcomes() string {
	s := fmt.Sprintf("migrated %d (re-stored %d, already current %d), written since the start %d, gone %d, failed %d",
		c.Migrated(), c.Restored, c.AlreadyCurrent, c.WrittenSinceStart, c.Gone, c.Failed)
	if c.WrittenSinceChange > 0 {
		s += fmt.Sprintf(", written since the storage change %d", c.WrittenSinceChange)
	}
	if c.NothingToRewrite > 0 {
		s += fmt.Sprintf(", nothing to rewrite %d", c.NothingToRewrite)
	}
	if c.ThroughStatus > 0 {
		s += fmt.Sprintf("; written through the status subresource after an admission denial %d", c.ThroughStatus)
	}
	left := c.ManagedFieldsLeft.Total()
	if c.ManagedFieldsRewritten > 0 || left > 0 {
		s += fmt.Sprintf("; managedFields moved off the retired versions on %d objects", c.ManagedFieldsRewritten)
	}
	if left > 0 {
		s += fmt.Sprintf(", entries left naming a retired version %d (%s)", left, c.ManagedFieldsLeft)
	}
	return s
}

// LeftCounts counts managedFields entries left naming a retired version,
// by why (managedfields.Reason): a struct, not a map, so that Counts
// compare with ==.
type LeftCounts struct {
	NotInVersion, NotServed, NotConverted, Refused, Unplaced, Denied int64
}

// Add counts n more entries left for reason r; a reason it does not know
// is counted as Unplaced, so that no entry left goes uncounted.
func (l *LeftCounts) Add(r managedfields.Reason, n int64) {
	switch r {
	case managedfields.NotInVersion:
		l.NotInVersion += n
	case managedfields.NotServed:
		l.NotServed += n
	case managedfields.NotConverted:
		l.NotConverted += n
	case managedfields.Refused:
		l.Refused += n
	case managedfields.Denied:
		l.Denied += n
	default:
		l.Unplaced += n
	}
}

// Total is the number of entries left, whatever the reason.
func (l LeftCounts) Total() int64 {
	return l.NotInVersion + l.NotServed + l.NotConverted + l.Refused + l.Unplaced + l.Denied
}

// String says how many were left for each reason that left any, as
// "NotConverted 2, Unplaced 1".
func (l LeftCounts) String() string {
	var parts []string
	for _, r := range []struct {
		reason managedfields.Reason
		n      int64
	}{
		{managedfields.NotInVersion, l.NotInVersion}, {managedfields.NotServed, l.NotServed},
		{managedfields.NotConverted, l.NotConverted}, {managedfields.Refused, l.Refused}, {managedfields.Unplaced, l.Unplaced},
		{managedfields.Denied, l.Denied},
	} {
		if r.n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", r.reason, r.n))
		}
	}
	return strings.Join(parts, ", ")
}

// Progress is a migration's counts so far.
type Progress struct {
	Counts
	// RemainingEstimate is the API server's estimate of objects not yet
	// listed, when it gives one.
	RemainingEstimate *int64
}
