package history

import (
	"cmp"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/followup"
)

// Default limits, those of a CronJob's successfulJobsHistoryLimit and
// failedJobsHistoryLimit.
const (
	DefaultSucceeded = 3
	DefaultFailed    = 1
)

// Policy is how many finished migrations of each resource are kept.
type Policy struct {
	// Succeeded and Failed are how many of the newest Succeeded and
	// Failed migrations of a resource are kept; 0 keeps only those a
	// decision still reads.
	Succeeded, Failed int
	// Row is how many failures in a row (and held successes in a row) of
	// one creator are kept: the number after which the retry delay stops
	// growing (RowFor). At least 1.
	Row int
}

// RowFor is how many failures in a row make the retry delay, base doubling
// per failure, reach maxDelay (followup.Backoff): the trigger and the
// re-encryption wait no longer after more, so deleting the older ones of
// a longer row changes no delay.
func RowFor(base, maxDelay time.Duration) int {
	n := 1
	for base > 0 && followup.Backoff(base, maxDelay, n) < maxDelay {
		n++
	}
	return n
}

// Expired is the finished migrations of ms to delete under p, resource by
// resource, oldest first within a resource. Only migrations svm created
// (followup.CreatedByLabel) are among them, never an unfinished one or
// one being deleted; users' count among the newest that p keeps.
func Expired(p Policy, ms []migrationv1alpha1.StorageVersionMigration) []*migrationv1alpha1.StorageVersionMigration {
	byResource := map[schema.GroupResource][]*migrationv1alpha1.StorageVersionMigration{}
	var order []schema.GroupResource
	for i := range ms {
		m := &ms[i]
		if !m.IsFinished() || m.DeletionTimestamp != nil {
			continue
		}
		gr := m.Spec.Resource.GroupResource()
		if _, ok := byResource[gr]; !ok {
			order = append(order, gr)
		}
		byResource[gr] = append(byResource[gr], m)
	}
	var out []*migrationv1alpha1.StorageVersionMigration
	for _, gr := range order {
		finished := byResource[gr]
		slices.SortFunc(finished, newestFirst)
		keep := Kept(p, finished)
		for i := len(finished) - 1; i >= 0; i-- {
			if !keep[finished[i]] && finished[i].Labels[followup.CreatedByLabel] != "" {
				out = append(out, finished[i])
			}
		}
	}
	return out
}

// Kept is the migrations of finished, the finished migrations of one
// resource newest first, that p keeps: the limits' newest Succeeded and
// Failed ones, and whatever the limits, those a decision of svm still
// reads (see the package doc).
func Kept(p Policy, finished []*migrationv1alpha1.StorageVersionMigration) map[*migrationv1alpha1.StorageVersionMigration]bool {
	keep := map[*migrationv1alpha1.StorageVersionMigration]bool{}
	var succeeded, failed []*migrationv1alpha1.StorageVersionMigration
	for _, m := range finished {
		if Failed(m) {
			failed = append(failed, m)
		} else {
			succeeded = append(succeeded, m)
		}
	}
	for _, m := range succeeded[:min(p.Succeeded, len(succeeded))] {
		keep[m] = true
	}
	for _, m := range failed[:min(p.Failed, len(failed))] {
		keep[m] = true
	}
	keepSuccessesRead(keep, succeeded)
	keepRow(keep, finished, max(p.Row, 1))
	keepInTree(keep, succeeded, failed)
	return keep
}

// keepSuccessesRead keeps, of succeeded (newest first), the newest per
// storage version hash: the trigger refines a resource's StorageState to
// its current hash from the last migration that succeeded for it; and the
// newest that skipped no object written since a storage change: the
// re-encryption records the last success that rewrote every object.
func keepSuccessesRead(keep map[*migrationv1alpha1.StorageVersionMigration]bool, succeeded []*migrationv1alpha1.StorageVersionMigration) {
	seen := map[string]bool{}
	rewroteAll := false
	for _, m := range succeeded {
		if h := m.Status.StorageVersionHash; !seen[h] {
			seen[h] = true
			keep[m] = true
		}
		if !rewroteAll && m.Status.Progress.WrittenSinceChange == 0 {
			rewroteAll = true
			keep[m] = true
		}
	}
}

// keepRow keeps the newest clean success of finished (newest first: one
// that left no managedFields entry naming a version to be pruned) and
// what did not get there since: the failures, which the trigger and the
// re-encryption count to double their retry delay (followup.NextRetry),
// and the held successes (entries left), which the trigger counts alike
// before it tries again. Of each kind and creator (the created-by label,
// users' together), the newest row are kept: the delay grows no more
// after them.
func keepRow(keep map[*migrationv1alpha1.StorageVersionMigration]bool, finished []*migrationv1alpha1.StorageVersionMigration, row int) {
	type kind struct {
		creator string
		failed  bool
	}
	counted := map[kind]int{}
	for _, m := range finished {
		if !Failed(m) && !held(m) {
			keep[m] = true // the newest clean success: the row ends here
			return
		}
		k := kind{creator: m.Labels[followup.CreatedByLabel], failed: Failed(m)}
		if counted[k] < row {
			counted[k]++
			keep[m] = true
		}
	}
}

// keepInTree keeps the newest success that the in-tree migrator executed
// and the newest failure it executed unless that success started in a
// later second than it ended. An in-tree migration is owned by svm's and
// goes with it, and one that failed with none succeeded after it is
// evidence that a version may still be stored (package maybestored:
// kube-controller-manager cuts a CRD's storedVersions when it starts a
// migration); creation times are in seconds, so one made in the same
// second does not count as after.
func keepInTree(keep map[*migrationv1alpha1.StorageVersionMigration]bool, succeeded, failed []*migrationv1alpha1.StorageVersionMigration) {
	var lastOK *migrationv1alpha1.StorageVersionMigration
	if i := slices.IndexFunc(succeeded, inTree); i >= 0 {
		lastOK = succeeded[i]
		keep[lastOK] = true
	}
	if i := slices.IndexFunc(failed, inTree); i >= 0 {
		f := failed[i]
		if lastOK == nil || startedAt(lastOK).Unix() <= EndedAt(f).Unix() {
			keep[f] = true
		}
	}
}

// Failed reports whether m failed; a migration is taken as failed when its
// Failed condition is true, whatever else it says, as the retry delays
// count it.
func Failed(m *migrationv1alpha1.StorageVersionMigration) bool {
	return m.HasCondition(migrationv1alpha1.MigrationFailed)
}

// held reports whether m succeeded but left managedFields entries naming
// a version to be pruned: the trigger holds the prune and tries again.
func held(m *migrationv1alpha1.StorageVersionMigration) bool {
	return m.Status.Progress.ManagedFieldsLeft.Total() > 0
}

func inTree(m *migrationv1alpha1.StorageVersionMigration) bool {
	return m.Status.InTreeMigration != ""
}

// EndedAt is when the finished migration m ended: status.completionTime,
// else when its Succeeded or Failed condition was last set, else its
// creation.
func EndedAt(m *migrationv1alpha1.StorageVersionMigration) time.Time {
	if m.Status.CompletionTime != nil {
		return m.Status.CompletionTime.Time
	}
	var t time.Time
	for _, c := range m.Status.Conditions {
		if (c.Type == migrationv1alpha1.MigrationSucceeded || c.Type == migrationv1alpha1.MigrationFailed) && c.LastUpdateTime.After(t) {
			t = c.LastUpdateTime.Time
		}
	}
	if t.IsZero() {
		return m.CreationTimestamp.Time
	}
	return t
}

// startedAt is when m started, else its creation.
func startedAt(m *migrationv1alpha1.StorageVersionMigration) time.Time {
	if m.Status.StartTime != nil {
		return m.Status.StartTime.Time
	}
	return m.CreationTimestamp.Time
}

// newestFirst orders finished migrations by when they ended, then were
// created, then by name, the newest first.
func newestFirst(a, b *migrationv1alpha1.StorageVersionMigration) int {
	return cmp.Or(
		EndedAt(b).Compare(EndedAt(a)),
		b.CreationTimestamp.Compare(a.CreationTimestamp.Time),
		cmp.Compare(b.Name, a.Name),
	)
}
