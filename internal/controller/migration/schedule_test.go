package migration

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/followup"
	"github.com/svm-project/svm/internal/intree"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func mig(name, resource string, created int, conds ...migrationv1alpha1.MigrationConditionType) migrationv1alpha1.StorageVersionMigration {
	m := migrationv1alpha1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(created) * time.Minute))},
		Spec:       migrationv1alpha1.StorageVersionMigrationSpec{Resource: migrationv1alpha1.GroupVersionResource{Version: "v1", Resource: resource}},
	}
	for _, c := range conds {
		m.Status.Conditions = append(m.Status.Conditions, migrationv1alpha1.MigrationCondition{Type: c, Status: corev1.ConditionTrue})
	}
	return m
}

// triggered is m made by svm's trigger for reason.
func triggered(m migrationv1alpha1.StorageVersionMigration, reason string) migrationv1alpha1.StorageVersionMigration {
	m.Labels = map[string]string{followup.CreatedByLabel: followup.TriggerValue}
	m.Annotations = map[string]string{followup.ReasonAnnotation: reason}
	return m
}

func withUID(m migrationv1alpha1.StorageVersionMigration, uid types.UID) migrationv1alpha1.StorageVersionMigration {
	m.UID = uid
	return m
}

// inTree is an in-tree migration of a core resource; forUID, when set,
// makes it the one svm created to execute the svm migration with that uid.
func inTree(name, resource string, running bool, forUID types.UID) storagemigrationv1.StorageVersionMigration {
	m := storagemigrationv1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       storagemigrationv1.StorageVersionMigrationSpec{Resource: metav1.GroupResource{Resource: resource}},
	}
	if running {
		m.Status.Conditions = []metav1.Condition{{Type: string(storagemigrationv1.MigrationRunning), Status: metav1.ConditionTrue}}
	}
	if forUID != "" {
		m.Annotations = map[string]string{intree.ForMigrationAnnotation: string(forUID)}
	}
	return m
}

func deleted(m migrationv1alpha1.StorageVersionMigration) migrationv1alpha1.StorageVersionMigration {
	now := metav1.NewTime(t0)
	m.DeletionTimestamp = &now
	return m
}

type scheduleTest = decisionTest[ScheduleInput, ScheduleDecision]

// TestSchedule checks the order migrations start in, and the slots and
// resources they take.
func TestSchedule(t *testing.T) {
	const running = migrationv1alpha1.MigrationRunning
	checkDecisions(t, Schedule, []scheduleTest{
		{
			name: "oldest first, one at a time by default",
			in:   ScheduleInput{Migrations: []migrationv1alpha1.StorageVersionMigration{mig("b", "secrets", 2), mig("a", "configmaps", 1)}, MaxParallel: 1},
			want: ScheduleDecision{Start: []string{"a"}},
		},
		{
			name: "a Running migration resumes before older new ones",
			in:   ScheduleInput{Migrations: []migrationv1alpha1.StorageVersionMigration{mig("old", "secrets", 1), mig("resumed", "configmaps", 5, running)}, MaxParallel: 1},
			want: ScheduleDecision{Start: []string{"resumed"}},
		},
		{
			name: "a storage change starts before older first-sight rewrites, a user's too",
			in: ScheduleInput{Migrations: []migrationv1alpha1.StorageVersionMigration{
				triggered(mig("first-a", "configmaps", 1), followup.ReasonFirstSight), triggered(mig("first-b", "pods", 2), followup.ReasonFirstSight),
				triggered(mig("change", "widgets", 3), followup.ReasonChanged), mig("users", "secrets", 4),
			}, MaxParallel: 3},
			want: ScheduleDecision{Start: []string{"change", "users", "first-a"}},
		},
		{
			name: "first-sight rewrites leave a slot free for a storage change",
			in: ScheduleInput{Migrations: []migrationv1alpha1.StorageVersionMigration{
				triggered(mig("first-a", "configmaps", 1, running), followup.ReasonFirstSight), triggered(mig("first-b", "pods", 2, running), followup.ReasonFirstSight),
				triggered(mig("first-c", "secrets", 3), followup.ReasonFirstSight),
			}, Running: map[string]bool{"first-a": true, "first-b": true}, MaxParallel: 3},
			want: ScheduleDecision{},
		},
		{
			name: "one slot: first sight takes it",
			in: ScheduleInput{Migrations: []migrationv1alpha1.StorageVersionMigration{
				triggered(mig("first-a", "configmaps", 1), followup.ReasonFirstSight),
			}, MaxParallel: 1},
			want: ScheduleDecision{Start: []string{"first-a"}},
		},
		{
			name: "one migration per resource",
			in:   ScheduleInput{Migrations: []migrationv1alpha1.StorageVersionMigration{mig("s1", "secrets", 1), mig("s2", "secrets", 2), mig("c", "configmaps", 3)}, MaxParallel: 3},
			want: ScheduleDecision{Start: []string{"s1", "c"}},
		},
		{
			name: "a resource busy with a running migration waits",
			in: ScheduleInput{Migrations: []migrationv1alpha1.StorageVersionMigration{mig("s1", "secrets", 1, running), mig("s2", "secrets", 2)},
				Running: map[string]bool{"s1": true}, MaxParallel: 3},
			want: ScheduleDecision{},
		},
		{
			name: "slots count running migrations",
			in: ScheduleInput{Migrations: []migrationv1alpha1.StorageVersionMigration{mig("a", "a", 1, running), mig("b", "b", 2), mig("c", "c", 3)},
				Running: map[string]bool{"a": true}, MaxParallel: 2},
			want: ScheduleDecision{Start: []string{"b"}},
		},
	})
}

// TestScheduleStopsAndWaits checks which migrations stop, never start, or
// wait for their backoff.
func TestScheduleStopsAndWaits(t *testing.T) {
	const running, succeeded, failed = migrationv1alpha1.MigrationRunning, migrationv1alpha1.MigrationSucceeded, migrationv1alpha1.MigrationFailed
	checkDecisions(t, Schedule, []scheduleTest{
		{
			name: "finished migrations never start",
			in:   ScheduleInput{Migrations: []migrationv1alpha1.StorageVersionMigration{mig("ok", "secrets", 1, succeeded), mig("bad", "pods", 1, failed)}, MaxParallel: 3},
			want: ScheduleDecision{},
		},
		{
			name: "deleted and finished running migrations stop, freeing their slots",
			in: ScheduleInput{Migrations: []migrationv1alpha1.StorageVersionMigration{deleted(mig("gone", "a", 1, running)), mig("done", "b", 1, succeeded), mig("next", "c", 2)},
				Running: map[string]bool{"gone": true, "done": true, "vanished": true}, MaxParallel: 1},
			want: ScheduleDecision{Stop: []string{"done", "gone", "vanished"}, Start: []string{"next"}},
		},
		{
			name: "a run that ended is not restarted before the cache shows its outcome",
			in: ScheduleInput{Migrations: []migrationv1alpha1.StorageVersionMigration{withUID(mig("a", "a", 1, running), "uid-a"), withUID(mig("b", "b", 2), "uid-b")},
				Ended: map[types.UID]bool{"uid-a": true}, MaxParallel: 1},
			want: ScheduleDecision{Start: []string{"b"}},
		},
		{
			name: "a re-created migration with the same name is not held by the old one's end",
			in: ScheduleInput{Migrations: []migrationv1alpha1.StorageVersionMigration{withUID(mig("a", "a", 1), "uid-new")},
				Ended: map[types.UID]bool{"uid-old": true}, MaxParallel: 1},
			want: ScheduleDecision{Start: []string{"a"}},
		},
		{
			name: "backoff holds a migration back and asks to be woken",
			in: ScheduleInput{Migrations: []migrationv1alpha1.StorageVersionMigration{mig("a", "a", 1, running), mig("b", "b", 2)},
				NotBefore: map[string]time.Time{"a": t0.Add(30 * time.Second)}, Now: t0, MaxParallel: 1},
			want: ScheduleDecision{Start: []string{"b"}, RequeueAfter: 30 * time.Second},
		},
		{
			name: "an expired backoff no longer holds",
			in: ScheduleInput{Migrations: []migrationv1alpha1.StorageVersionMigration{mig("a", "a", 1, running)},
				NotBefore: map[string]time.Time{"a": t0}, Now: t0.Add(time.Second), MaxParallel: 1},
			want: ScheduleDecision{Start: []string{"a"}},
		},
	})
}

// TestScheduleInTree checks how in-tree migrations of a resource hold
// svm's back.
func TestScheduleInTree(t *testing.T) {
	const running = migrationv1alpha1.MigrationRunning
	checkDecisions(t, Schedule, []scheduleTest{
		{
			name: "a Running in-tree migration of the resource holds a new migration back",
			in: ScheduleInput{Migrations: []migrationv1alpha1.StorageVersionMigration{mig("s", "secrets", 1), mig("c", "configmaps", 2)},
				InTree: []storagemigrationv1.StorageVersionMigration{inTree("kcm", "secrets", true, "")}, MaxParallel: 1},
			want: ScheduleDecision{Start: []string{"c"}, Held: map[string]string{"s": "kcm"}},
		},
		{
			name: "a running migration stops when an in-tree migration of its resource starts, freeing its slot",
			in: ScheduleInput{Migrations: []migrationv1alpha1.StorageVersionMigration{mig("s", "secrets", 1, running), mig("c", "configmaps", 2)},
				InTree: []storagemigrationv1.StorageVersionMigration{inTree("kcm", "secrets", true, "")}, Running: map[string]bool{"s": true}, MaxParallel: 1},
			want: ScheduleDecision{Stop: []string{"s"}, Yield: map[string]string{"s": "kcm"}, Start: []string{"c"}},
		},
		{
			name: "pending and ended in-tree migrations hold nothing",
			in: ScheduleInput{Migrations: []migrationv1alpha1.StorageVersionMigration{mig("s", "secrets", 1)},
				InTree: []storagemigrationv1.StorageVersionMigration{inTree("pending", "secrets", false, "")}, MaxParallel: 1},
			want: ScheduleDecision{Start: []string{"s"}},
		},
		{
			name: "the in-tree migration executing a migration does not hold that migration",
			in: ScheduleInput{Migrations: []migrationv1alpha1.StorageVersionMigration{withUID(mig("s", "secrets", 1, running), "uid-s")},
				InTree: []storagemigrationv1.StorageVersionMigration{inTree("s", "secrets", true, "uid-s")}, MaxParallel: 1},
			want: ScheduleDecision{Start: []string{"s"}},
		},
		{
			name: "an in-tree migration of another resource holds nothing",
			in: ScheduleInput{Migrations: []migrationv1alpha1.StorageVersionMigration{mig("s", "secrets", 1)},
				InTree: []storagemigrationv1.StorageVersionMigration{inTree("kcm", "configmaps", true, "")}, MaxParallel: 1},
			want: ScheduleDecision{Start: []string{"s"}},
		},
	})
}
