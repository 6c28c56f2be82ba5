package followup

import (
	"time"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
)

// CreatedByLabel marks the migrations svm creates; its value says which
// part of svm created one.
const CreatedByLabel = "migration.k8s.io/created-by"

// How the trigger marks its migrations, which the migration controller
// reads too: it skips objects written since a storage change only for the
// trigger's migrations (they are made for that change), and runs those
// made on first sight after those made for a known change.
const (
	// TriggerValue is CreatedByLabel's value on the trigger's migrations.
	TriggerValue = "svm-trigger"
	// StorageVersionHashAnnotation records the storage version hash a
	// trigger migration was created for.
	StorageVersionHashAnnotation = "migration.k8s.io/storage-version-hash"
	// ReasonAnnotation says why the trigger made a migration:
	// ReasonChanged or ReasonFirstSight.
	ReasonAnnotation = "migration.k8s.io/reason"
	// ReasonChanged: objects are known to be stored in a version other
	// than the current one (a storage version change svm saw, or a CRD's
	// storedVersions).
	ReasonChanged = "StorageVersionChanged"
	// ReasonFirstSight: svm does not know what is stored (it sees the
	// resource for the first time, or lost track), so it rewrites
	// everything once; nothing says a version is left behind.
	ReasonFirstSight = "FirstSight"
)

// Trigger is the trigger's mark.
var Trigger = Mark{Value: TriggerValue, TargetKey: StorageVersionHashAnnotation}

// FirstSight reports whether the trigger made m to make sure of what is
// stored, with no change known.
func FirstSight(m *migrationv1alpha1.StorageVersionMigration) bool {
	return Trigger.Owns(m) && m.Annotations[ReasonAnnotation] == ReasonFirstSight
}

// Mark is how one part of svm marks the migrations it creates:
// CreatedByLabel set to Value, and the target each was made for recorded
// in the annotation TargetKey, and in AlsoKey when that is set.
type Mark struct {
	Value     string
	TargetKey string
	// AlsoKey, when set, names a second annotation the target is recorded
	// in: the target is then TargetKey's value, and, when AlsoKey's is not
	// empty, a space and AlsoKey's. Migrations made before the second
	// annotation existed read as made for TargetKey's value alone.
	AlsoKey string
}

// Owns reports whether m carries the mark: only such migrations are ever
// stopped, and only their failures hold a new one back.
func (k Mark) Owns(m *migrationv1alpha1.StorageVersionMigration) bool {
	return m.Labels[CreatedByLabel] == k.Value
}

// Target is what a migration carrying the mark was made for.
func (k Mark) Target(m *migrationv1alpha1.StorageVersionMigration) string {
	t := m.Annotations[k.TargetKey]
	if also := m.Annotations[k.AlsoKey]; k.AlsoKey != "" && also != "" {
		t += " " + also
	}
	return t
}

// For is the migrations of ms that carry the mark and were made for
// target.
func (k Mark) For(ms []migrationv1alpha1.StorageVersionMigration, target string) []migrationv1alpha1.StorageVersionMigration {
	var out []migrationv1alpha1.StorageVersionMigration
	for i := range ms {
		if m := &ms[i]; k.Owns(m) && k.Target(m) == target {
			out = append(out, *m)
		}
	}
	return out
}

// Unfinished names, in the order of ms, the active migrations carrying the
// mark that were made for a target other than keep; keep "" keeps none.
// They are the ones to stop once the target moves on: their work would be
// redone, or would claim the wrong target.
func (k Mark) Unfinished(ms []migrationv1alpha1.StorageVersionMigration, keep string) []string {
	var out []string
	for i := range ms {
		if m := &ms[i]; k.Owns(m) && Active(m) && (keep == "" || k.Target(m) != keep) {
			out = append(out, m.Name)
		}
	}
	return out
}

// Active reports whether m, whoever made it, has yet to finish and is not
// being deleted: it is running, or will.
func Active(m *migrationv1alpha1.StorageVersionMigration) bool {
	return !m.IsFinished() && m.DeletionTimestamp == nil
}

// FirstActive is the first active migration of ms, nil for none.
func FirstActive(ms []migrationv1alpha1.StorageVersionMigration) *migrationv1alpha1.StorageVersionMigration {
	for i := range ms {
		if m := &ms[i]; Active(m) {
			return m
		}
	}
	return nil
}

// Retry is when a new migration may follow failed ones.
type Retry struct {
	// Failures counts the failed migrations.
	Failures int
	// Due is when a new one may start: the end of the last failure plus a
	// delay doubling per failure. Zero when none failed.
	Due time.Time
}

// NextRetry is the Retry after the failed migrations of ms, each of which
// ended at end(m). The delay after the first failure is base, doubling per
// further failure, at most maxDelay: a migration that keeps failing (a
// webhook that rejects writes, an object that cannot be converted) is not
// retried in a tight loop, yet a passing fault does not hold it back long.
func NextRetry(ms []migrationv1alpha1.StorageVersionMigration, end func(*migrationv1alpha1.StorageVersionMigration) time.Time, base, maxDelay time.Duration) Retry {
	var r Retry
	var last time.Time
	for i := range ms {
		m := &ms[i]
		if !m.HasCondition(migrationv1alpha1.MigrationFailed) {
			continue
		}
		r.Failures++
		if t := end(m); t.After(last) {
			last = t
		}
	}
	if r.Failures > 0 {
		r.Due = last.Add(Backoff(base, maxDelay, r.Failures))
	}
	return r
}

// Wait is how long from now a new migration must still wait, 0 for none.
func (r Retry) Wait(now time.Time) time.Duration {
	if r.Failures == 0 || !now.Before(r.Due) {
		return 0
	}
	return r.Due.Sub(now)
}

// Backoff is the delay after the n-th of a row of attempts that did not
// get there: base, doubling per further one, at most maxDelay.
func Backoff(base, maxDelay time.Duration, failures int) time.Duration {
	d := base
	for i := 1; i < failures && d < maxDelay; i++ {
		d *= 2
	}
	return min(d, maxDelay)
}
