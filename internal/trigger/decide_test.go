package trigger

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const unknown = migrationv1alpha1.UnknownStorageVersionHash

func ptr[T any](v T) *T { return &v }

func state(created time.Time, current string, persisted ...string) *migrationv1alpha1.StorageState {
	return &migrationv1alpha1.StorageState{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com", CreationTimestamp: metav1.NewTime(created)},
		Status:     migrationv1alpha1.StorageStateStatus{CurrentStorageVersionHash: current, PersistedStorageVersionHashes: persisted, LastHeartbeatTime: metav1.NewTime(created)},
	}
}

// owned is a trigger migration for hash; outcome is "", "ok" or "failed".
func owned(name, hash string, created time.Time, outcome string) migrationv1alpha1.StorageVersionMigration {
	m := user(name, created, outcome, hash)
	m.Labels = map[string]string{CreatedByLabel: CreatedByValue}
	m.Annotations = map[string]string{TargetHashAnnotation: hash}
	return m
}

func user(name string, created time.Time, outcome, storedHash string) migrationv1alpha1.StorageVersionMigration {
	m := migrationv1alpha1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)}}
	m.Status.StorageVersionHash = storedHash
	end := metav1.NewTime(created.Add(time.Minute))
	switch outcome {
	case "ok":
		m.Status.Conditions = []migrationv1alpha1.MigrationCondition{{Type: migrationv1alpha1.MigrationSucceeded, Status: corev1.ConditionTrue}}
		m.Status.CompletionTime = &end
	case "failed":
		m.Status.Conditions = []migrationv1alpha1.MigrationCondition{{Type: migrationv1alpha1.MigrationFailed, Status: corev1.ConditionTrue}}
		m.Status.CompletionTime = &end
	}
	return m
}

func status(now time.Time, current string, persisted ...string) *migrationv1alpha1.StorageStateStatus {
	return &migrationv1alpha1.StorageStateStatus{CurrentStorageVersionHash: current, PersistedStorageVersionHashes: persisted, LastHeartbeatTime: metav1.NewTime(now)}
}

// changed is st with the current hash first seen at since.
func changed(st *migrationv1alpha1.StorageStateStatus, since time.Time) *migrationv1alpha1.StorageStateStatus {
	st.CurrentStorageVersionSince = ptr(metav1.NewTime(since))
	return st
}

// seen is s with its current hash first seen at since.
// behind is st saying that servers disagree, or are behind a CRD.
func behind(st *migrationv1alpha1.StorageStateStatus, message string) *migrationv1alpha1.StorageStateStatus {
	st.ServersDisagree = message
	return st
}

func withBehind(s *migrationv1alpha1.StorageState, message string) *migrationv1alpha1.StorageState {
	behind(&s.Status, message)
	return s
}

func seen(s *migrationv1alpha1.StorageState, since time.Time) *migrationv1alpha1.StorageState {
	changed(&s.Status, since)
	return s
}

// withRevision is s with the revision since which every server stores its
// current version recorded.
func withRevision(s *migrationv1alpha1.StorageState, revision string) *migrationv1alpha1.StorageState {
	s.Status.CurrentStorageVersionRevision = revision
	return s
}

// ignoreReason leaves the reason of a migration to TestDecideReason.
var ignoreReason = cmpopts.IgnoreFields(Decision{}, "Reason")

func TestDecideReason(t *testing.T) {
	now := t0.Add(time.Hour)
	tests := []struct {
		name string
		in   Input
		want string
	}{
		{"first sight of a resource", Input{Now: now, Observed: ptr("A")}, ReasonFirstSight},
		{"first sight of a CRD that lists another stored version", Input{Now: now, Observed: ptr("B"), CRD: &CRDStorage{Generation: 2, StoredHashes: []string{"A"}}}, ReasonChanged},
		{"a state reset to Unknown", Input{Now: now, Observed: ptr("A"), State: state(t0, "A", unknown)}, ReasonFirstSight},
		{"the hash changed from one svm recorded", Input{Now: now, Observed: ptr("B"), State: state(t0, "A", "A")}, ReasonChanged},
		{"a change seen before the first migration ended", Input{Now: now, Observed: ptr("B"), State: state(t0, "A", unknown)}, ReasonFirstSight},
		{"the CRD lists a version svm never saw", Input{Now: now, State: state(t0, "B", "B"), CRD: &CRDStorage{Generation: 3, StoredHashes: []string{"A"}}}, ReasonChanged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.in)
			if d.CreateMigrationFor == nil {
				t.Fatalf("no migration: %+v", d)
			}
			if d.Reason != tt.want {
				t.Errorf("reason %q, want %q", d.Reason, tt.want)
			}
		})
	}
}

// decideTest is a case of Decide's table: its input and the decision it
// must make, but for the reason.
type decideTest struct {
	name string
	in   Input
	want Decision
}

func checkDecide(t *testing.T, tests []decideTest) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Decide(tt.in), ignoreReason); diff != "" {
				t.Errorf("Decide() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	now := t0.Add(time.Hour)
	checkDecide(t, []decideTest{
		{
			name: "first sight: Unknown, the hash, a migration, and svm's stale migrations stopped",
			in:   Input{Now: now, Observed: ptr("A"), Migrations: []migrationv1alpha1.StorageVersionMigration{owned("old", "Z", t0, ""), user("mine", t0, "", "")}},
			want: Decision{DeleteMigrations: []string{"old"}, CreateState: true, Status: changed(status(now, "A", unknown), now), CreateMigrationFor: ptr("A")},
		},
		{
			name: "no state and no discovery answer: nothing",
			in:   Input{Now: now},
			want: Decision{},
		},
		{
			name: "hash unchanged and migrated: heartbeat only",
			in:   Input{Now: now, Observed: ptr("A"), State: state(t0, "A", "A")},
			want: Decision{Status: status(now, "A", "A")},
		},
		{
			name: "hash unchanged and migrated, seen by a round a change asked for: nothing to write",
			in:   Input{Now: now, Observed: ptr("A"), State: state(t0, "A", "A"), SkipHeartbeat: true},
			want: Decision{},
		},
		{
			name: "hash changed, seen by a round a change asked for: the change is written, the heartbeat left",
			in:   Input{Now: now, Observed: ptr("B"), State: state(t0, "A", "A"), SkipHeartbeat: true},
			want: Decision{Status: changed(status(t0, "B", "A", "B"), now), CreateMigrationFor: ptr("B")},
		},
		{
			name: "hash changed: append, stop svm's other migrations (never a user's), migrate to it",
			in: Input{Now: now, Observed: ptr("B"), State: state(t0, "A", "A"),
				Migrations: []migrationv1alpha1.StorageVersionMigration{owned("to-a", "A", t0, ""), user("mine", t0, "", "")}},
			want: Decision{DeleteMigrations: []string{"to-a"}, Status: changed(status(now, "B", "A", "B"), now), CreateMigrationFor: ptr("B")},
		},
		{
			name: "hash changed to one svm already migrates to: stop the others, start no second",
			in: Input{Now: now, Observed: ptr("B"), State: state(t0, "A", "A"),
				Migrations: []migrationv1alpha1.StorageVersionMigration{owned("to-a", "A", t0, ""), owned("to-b", "B", t0, "")}},
			want: Decision{DeleteMigrations: []string{"to-a"}, Status: changed(status(now, "B", "A", "B"), now)},
		},
		{
			name: "flipped back: the old hash is not listed twice",
			in:   Input{Now: now, Observed: ptr("A"), State: state(t0, "B", "A", "B")},
			want: Decision{Status: changed(status(now, "A", "A", "B"), now), CreateMigrationFor: ptr("A")},
		},
		{
			name: "success for the current hash refines the list",
			in: Input{Now: now, Observed: ptr("B"), State: state(t0, "B", "A", "B"),
				Migrations: []migrationv1alpha1.StorageVersionMigration{owned("to-b", "B", t0, "ok")}},
			want: Decision{Status: status(now, "B", "B")},
		},
		{
			name: "success refines without a discovery answer too, keeping the heartbeat",
			in: Input{Now: now, State: state(t0, "B", "A", "B"),
				Migrations: []migrationv1alpha1.StorageVersionMigration{owned("to-b", "B", t0, "ok")}},
			want: Decision{Status: status(t0, "B", "B")},
		},
		{
			name: "a migration made for B that stored A (started before the flip) proves nothing",
			in: Input{Now: now, Observed: ptr("B"), State: state(t0, "B", "A", "B"),
				Migrations: []migrationv1alpha1.StorageVersionMigration{func() migrationv1alpha1.StorageVersionMigration {
					m := owned("to-b", "B", t0, "ok")
					m.Status.StorageVersionHash = "A"
					return m
				}()}},
			want: Decision{Status: status(now, "B", "A", "B"), CreateMigrationFor: ptr("B")},
		},
		{
			name: "a user's successful migration to the current hash counts",
			in: Input{Now: now, State: state(t0, "B", "A", "B"),
				Migrations: []migrationv1alpha1.StorageVersionMigration{user("mine", t0, "ok", "B")}},
			want: Decision{Status: status(t0, "B", "B")},
		},
		{
			name: "migrations older than the state (before a reset) prove nothing",
			in: Input{Now: now, State: state(t0, "A", unknown),
				Migrations: []migrationv1alpha1.StorageVersionMigration{owned("before-reset", "A", t0.Add(-time.Hour), "ok")}},
			want: Decision{CreateMigrationFor: ptr("A")},
		},
		{
			name: "a migration under way: wait",
			in: Input{Now: now, State: state(t0, "A", unknown),
				Migrations: []migrationv1alpha1.StorageVersionMigration{owned("running", "A", t0, "")}},
			want: Decision{},
		},
		{
			name: "a user's migration under way: wait rather than double the load",
			in: Input{Now: now, State: state(t0, "A", unknown),
				Migrations: []migrationv1alpha1.StorageVersionMigration{user("mine", t0, "", "")}},
			want: Decision{},
		},
		{
			name: "one failure: retry after the base delay, the failure stays",
			in: Input{Now: t0.Add(90 * time.Second), State: state(t0, "A", unknown), RetryBase: time.Minute, RetryMax: time.Hour,
				Migrations: []migrationv1alpha1.StorageVersionMigration{owned("f1", "A", t0, "failed")}},
			want: Decision{RequeueAfter: 30 * time.Second, Retry: true},
		},
		{
			name: "one failure, delay over: a new migration",
			in: Input{Now: t0.Add(2 * time.Minute), State: state(t0, "A", unknown), RetryBase: time.Minute, RetryMax: time.Hour,
				Migrations: []migrationv1alpha1.StorageVersionMigration{owned("f1", "A", t0, "failed")}},
			want: Decision{CreateMigrationFor: ptr("A")},
		},
		{
			name: "three failures: the delay has doubled twice",
			in: Input{Now: t0.Add(4 * time.Minute), State: state(t0, "A", unknown), RetryBase: time.Minute, RetryMax: time.Hour,
				Migrations: []migrationv1alpha1.StorageVersionMigration{owned("f1", "A", t0, "failed"), owned("f2", "A", t0.Add(time.Minute), "failed"), owned("f3", "A", t0.Add(2*time.Minute), "failed")}},
			// The last ended at t0+3m; 4 minutes later is t0+7m.
			want: Decision{RequeueAfter: 3 * time.Minute, Retry: true},
		},
		{
			name: "a state whose status was never written counts as Unknown",
			in:   Input{Now: now, Observed: ptr("A"), State: &migrationv1alpha1.StorageState{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(t0)}}},
			want: Decision{Status: changed(status(now, "A", unknown, "A"), now), CreateMigrationFor: ptr("A")},
		},
		{
			name: "servers disagree: Unknown, every reported hash persisted, svm's migrations stopped (never a user's)",
			in: Input{Now: now, Observed: ptr("A"), State: state(t0, "A", "A"), Encoding: &Encoding{Reported: []string{"A", "B"}},
				Migrations: []migrationv1alpha1.StorageVersionMigration{owned("to-a", "A", t0, ""), user("mine", t0, "", "")}},
			want: Decision{DeleteMigrations: []string{"to-a"}, Status: changed(status(now, unknown, "A", "B"), now)},
		},
		{
			name: "servers disagree on a state whose status was never written: Unknown, then every reported hash",
			in: Input{Now: now, State: &migrationv1alpha1.StorageState{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(t0)}},
				Encoding: &Encoding{Reported: []string{"B", "A"}}},
			want: Decision{Status: changed(status(now, unknown, unknown, "B", "A"), now)},
		},
		{
			name: "servers disagree at first sight: a state that says Unknown, no migration",
			in:   Input{Now: now, Observed: ptr("A"), Encoding: &Encoding{Reported: []string{"B", "A"}}},
			want: Decision{CreateState: true, Status: changed(status(now, unknown, unknown, "B", "A"), now)},
		},
		{
			name: "servers still disagree: heartbeat only, Unknown since it began",
			in: Input{Now: now, State: func() *migrationv1alpha1.StorageState {
				s := state(t0, unknown, "A", "B")
				s.Status.CurrentStorageVersionSince = ptr(metav1.NewTime(t0))
				return s
			}(), Encoding: &Encoding{Reported: []string{"A", "B"}}},
			want: Decision{Status: changed(status(now, unknown, "A", "B"), t0)},
		},
		{
			name: "servers agree again: the common version is current, and migrated to",
			in:   Input{Now: now, Observed: ptr("A"), State: state(t0, unknown, "A", "B"), Encoding: &Encoding{Common: "B", Reported: []string{"B"}}},
			want: Decision{Status: changed(status(now, "B", "A", "B"), now), CreateMigrationFor: ptr("B"), RecordRevision: true},
		},
		{
			name: "servers agree on a new version: the old version's revision is dropped, the new one's read",
			in:   Input{Now: now, State: withRevision(state(t0, "A", "A"), "120"), Encoding: &Encoding{Common: "B", Reported: []string{"B"}}},
			want: Decision{Status: changed(status(now, "B", "A", "B"), now), CreateMigrationFor: ptr("B"), RecordRevision: true},
		},
		{
			name: "servers disagree: the revision is dropped",
			in:   Input{Now: now, State: withRevision(state(t0, "A", "A"), "120"), Encoding: &Encoding{Reported: []string{"A", "B"}}},
			want: Decision{Status: changed(status(now, unknown, "A", "B"), now)},
		},
		{
			name: "discovery alone sees a change: no revision, another server may still write the old version",
			in:   Input{Now: now, Observed: ptr("B"), State: withRevision(state(t0, "A", "A"), "120")},
			want: Decision{Status: changed(status(now, "B", "A", "B"), now), CreateMigrationFor: ptr("B")},
		},
		{
			name: "a retry after a failure keeps the revision recorded",
			in: Input{Now: now, State: withRevision(state(t0, "B", "A", "B"), "120"), Encoding: &Encoding{Common: "B", Reported: []string{"B"}},
				RetryBase: time.Minute, RetryMax: time.Hour, Migrations: []migrationv1alpha1.StorageVersionMigration{owned("f1", "B", t0, "failed")}},
			want: Decision{Status: withRevision(&migrationv1alpha1.StorageState{Status: *status(now, "B", "A", "B")}, "120").Status.DeepCopy(), CreateMigrationFor: ptr("B")},
		},
		{
			name: "the StorageVersion API's common version prevails over one server's discovery",
			in:   Input{Now: now, Observed: ptr("A"), State: state(t0, "B", "B"), Encoding: &Encoding{Common: "B", Reported: []string{"B"}}},
			want: Decision{Status: status(now, "B", "B")},
		},
		{
			name: "a CRD's storage changed: the hash is recorded, the migration waits for the servers to settle",
			in: Input{Now: now, Observed: ptr("B"), State: state(t0, "A", "A"), CRD: &CRDStorage{Generation: 2}, SettleDelay: 30 * time.Second,
				Migrations: []migrationv1alpha1.StorageVersionMigration{owned("to-a", "A", t0, "")}},
			want: Decision{DeleteMigrations: []string{"to-a"}, Status: changed(status(now, "B", "A", "B"), now), RequeueAfter: 30 * time.Second},
		},
		{
			name: "a CRD's storage change the watch delivered 20 s before this round: the settle counts from then, and the clock's slack",
			in: Input{Now: now, Observed: ptr("B"), State: state(t0, "A", "A"), CRD: &CRDStorage{Generation: 2, SeenAt: now.Add(-20 * time.Second)},
				SettleDelay: 30 * time.Second},
			want: Decision{Status: changed(status(now, "B", "A", "B"), now.Add(-18*time.Second)), RequeueAfter: 12 * time.Second},
		},
		{
			name: "a CRD's storage change delivered longer ago than the settle and drain: migrate at once",
			in: Input{Now: now, Observed: ptr("B"), State: state(t0, "A", "A"), CRD: &CRDStorage{Generation: 2, SeenAt: now.Add(-40 * time.Second)},
				SettleDelay: 20 * time.Second, DrainMargin: 10 * time.Second},
			want: Decision{Status: changed(status(now, "B", "A", "B"), now.Add(-38*time.Second)), CreateMigrationFor: ptr("B"), RecordRevision: true},
		},
		{
			name: "a CRD's change delivered within a second: the second after it and the slack, never one before the change",
			in: Input{Now: now, Observed: ptr("B"), State: state(t0, "A", "A"), CRD: &CRDStorage{Generation: 2, SeenAt: now.Add(-20*time.Second + 300*time.Millisecond)},
				SettleDelay: 30 * time.Second},
			want: Decision{Status: changed(status(now, "B", "A", "B"), now.Add(-17*time.Second)), RequeueAfter: 13 * time.Second},
		},
		{
			name: "a CRD's change delivered 20 s ago, but a server still reports the storage before: counted from the round",
			in: Input{Now: now, Observed: ptr("B"), State: state(t0, "A", "A"), CRD: &CRDStorage{Generation: 2, StorageHash: "B", SeenAt: now.Add(-20 * time.Second)},
				SettleDelay: 30 * time.Second, ServersBehind: "b reports A"},
			want: Decision{Status: behind(changed(status(now, "B", "A", "B"), now), "b reports A"), RequeueAfter: 30 * time.Second},
		},
		{
			name: "a CRD's change delivered within the clock's slack of this round: counted from the round",
			in: Input{Now: now, Observed: ptr("B"), State: state(t0, "A", "A"), CRD: &CRDStorage{Generation: 2, SeenAt: now.Add(-1500 * time.Millisecond)},
				SettleDelay: 30 * time.Second},
			want: Decision{Status: changed(status(now, "B", "A", "B"), now), RequeueAfter: 30 * time.Second},
		},
		{
			name: "a CRD's resource at first sight waits too",
			in:   Input{Now: now, Observed: ptr("A"), CRD: &CRDStorage{Generation: 1}, SettleDelay: 30 * time.Second},
			want: Decision{CreateState: true, Status: changed(status(now, "A", unknown), now), RequeueAfter: 30 * time.Second},
		},
		{
			name: "settling: wait out the rest",
			in:   Input{Now: t0.Add(20 * time.Second), State: seen(state(t0, "B", "A", "B"), t0), CRD: &CRDStorage{Generation: 2}, SettleDelay: 30 * time.Second},
			want: Decision{RequeueAfter: 10 * time.Second},
		},
		{
			name: "settled: migrate",
			in:   Input{Now: t0.Add(30 * time.Second), State: seen(state(t0, "B", "A", "B"), t0), CRD: &CRDStorage{Generation: 2}, SettleDelay: 30 * time.Second},
			want: Decision{CreateMigrationFor: ptr("B"), RecordRevision: true},
		},
		{
			name: "the settle delay passed but a server still reports the storage before: the settle starts over",
			in: Input{Now: t0.Add(30 * time.Second), State: seen(state(t0, "B", "A", "B"), t0), CRD: &CRDStorage{Generation: 2, StorageHash: "B"},
				SettleDelay: 30 * time.Second, ServersBehind: "b reports A"},
			want: Decision{Status: behind(changed(status(t0, "B", "A", "B"), t0.Add(30*time.Second)), "b reports A"), RequeueAfter: 30 * time.Second},
		},
		{
			name: "every server took the CRD's storage up: settled, migrate",
			in: Input{Now: t0.Add(30 * time.Second), State: withBehind(seen(state(t0, "B", "A", "B"), t0), "b reports A"),
				CRD: &CRDStorage{Generation: 2, StorageHash: "B"}, SettleDelay: 30 * time.Second},
			want: Decision{Status: changed(status(t0, "B", "A", "B"), t0), CreateMigrationFor: ptr("B"), RecordRevision: true},
		},
		{
			name: "a state from before svm recorded when the hash was seen is settled",
			in:   Input{Now: now, State: state(now, "B", "A", "B"), CRD: &CRDStorage{Generation: 2}, SettleDelay: 30 * time.Second},
			want: Decision{CreateMigrationFor: ptr("B"), RecordRevision: true},
		},
		{
			name: "built-in resources do not wait: their servers report in the StorageVersion API",
			in:   Input{Now: now, Observed: ptr("B"), State: state(t0, "A", "A"), SettleDelay: 30 * time.Second},
			want: Decision{Status: changed(status(now, "B", "A", "B"), now), CreateMigrationFor: ptr("B")},
		},
		{
			name: "the current hash Unknown (servers disagree): never migrate",
			in:   Input{Now: now, State: state(t0, unknown, "A", "B")},
			want: Decision{},
		},
	})
}

func atGeneration(m migrationv1alpha1.StorageVersionMigration, gen string) migrationv1alpha1.StorageVersionMigration {
	m.Annotations[CRDGenerationAnnotation] = gen
	return m
}

func TestDecideCRDStoredVersions(t *testing.T) {
	now := t0.Add(time.Hour)
	crd := &CRDStorage{Generation: 3, StoredHashes: []string{"A"}}
	checkDecide(t, []decideTest{
		{
			name: "stored versions svm never saw join the persisted list, the storage counts as new since now, and a migration starts",
			in:   Input{Now: now, State: state(t0, "B", "B"), CRD: crd},
			want: Decision{Status: changed(status(t0, "B", "B", "A"), now), CreateMigrationFor: ptr("B"), RecordRevision: true},
		},
		{
			name: "an old success does not prove the stored versions gone",
			in: Input{Now: now, State: state(t0, "B", "B"), CRD: crd,
				Migrations: []migrationv1alpha1.StorageVersionMigration{atGeneration(owned("old", "B", t0, "ok"), "2")}},
			want: Decision{Status: changed(status(t0, "B", "B", "A"), now), CreateMigrationFor: ptr("B"), RecordRevision: true},
		},
		{
			name: "a success at the current generation refines and prunes",
			in: Input{Now: now, State: state(t0, "B", "B", "A"), CRD: crd,
				Migrations: []migrationv1alpha1.StorageVersionMigration{atGeneration(owned("new", "B", t0, "ok"), "3")}},
			want: Decision{Status: status(t0, "B", "B"), PruneStoredVersions: true},
		},
		{
			name: "a user's success cannot vouch for the generation",
			in: Input{Now: now, State: state(t0, "B", "B", "A"), CRD: crd,
				Migrations: []migrationv1alpha1.StorageVersionMigration{user("mine", t0, "ok", "B")}},
			want: Decision{CreateMigrationFor: ptr("B"), RecordRevision: true},
		},
		{
			name: "nothing stored but the storage version: the usual rules",
			in: Input{Now: now, State: state(t0, "B", "A", "B"), CRD: &CRDStorage{Generation: 3},
				Migrations: []migrationv1alpha1.StorageVersionMigration{user("mine", t0, "ok", "B")}},
			want: Decision{Status: status(t0, "B", "B")},
		},
	})
}

func TestStaleness(t *testing.T) {
	s := state(t0, "A", "A")
	if IsStale(s, t0.Add(9*time.Minute), 10*time.Minute) {
		t.Error("stale after 9 minutes with a 10 minute window")
	}
	if !IsStale(s, t0.Add(11*time.Minute), 10*time.Minute) {
		t.Error("not stale after 11 minutes with a 10 minute window")
	}
	if diff := cmp.Diff(status(t0.Add(time.Hour), "A", unknown), ResetStatus(s, t0.Add(time.Hour))); diff != "" {
		t.Errorf("ResetStatus (-want +got):\n%s", diff)
	}
	// A revision recorded does not: svm may have missed a change.
	withRevision(s, "120")
	if diff := cmp.Diff(status(t0.Add(time.Hour), "A", unknown), ResetStatus(s, t0.Add(time.Hour))); diff != "" {
		t.Errorf("ResetStatus of a state with a revision (-want +got):\n%s", diff)
	}
	// What a state records about encryption survives a reset.
	s.Status.Encryption = &migrationv1alpha1.StorageEncryption{ConfigHash: "sha256:c2", RewrittenConfigHash: "sha256:c2", RewrittenBy: "secrets-reencrypt-x"}
	want := status(t0.Add(time.Hour), "A", unknown)
	want.Encryption = s.Status.Encryption.DeepCopy()
	if diff := cmp.Diff(want, ResetStatus(s, t0.Add(time.Hour))); diff != "" {
		t.Errorf("ResetStatus of a state with an encryption record (-want +got):\n%s", diff)
	}
}

// withFingerprint is s with the storage it was recorded for.
func withFingerprint(s *migrationv1alpha1.StorageState, fingerprint string) *migrationv1alpha1.StorageState {
	s.Status.StorageFingerprint = fingerprint
	return s
}

// recorded is st recording fingerprint, since and revision.
func recorded(st *migrationv1alpha1.StorageStateStatus, fingerprint string, since time.Time, revision string) *migrationv1alpha1.StorageStateStatus {
	st.StorageFingerprint = fingerprint
	st.CurrentStorageVersionRevision = revision
	return changed(st, since)
}

// TestDecideStorageMoved: the hash svm recorded can come back with other
// storage behind it. The CRD's storage version went from v2 ("B") to v1
// ("A") and back between two looks: the hash is B again, but the CRD's
// generation is not the one the revision was recorded at, and objects
// written in between are stored in v1 (its storedVersions list v1 again).
func TestDecideStorageMoved(t *testing.T) {
	const (
		at3    = "crd=u1/3/v2"
		at5    = "crd=u1/5/v2"
		settle = 30 * time.Second
		drain  = 60 * time.Second
		wait   = settle + drain
	)
	now := t0.Add(time.Hour)
	back := &CRDStorage{Generation: 5, StorageHash: "B", StoredHashes: []string{"A"}}
	migrated := func() *migrationv1alpha1.StorageState {
		return withFingerprint(withRevision(seen(state(t0, "B", "B"), t0), "100"), at3)
	}
	checkDecide(t, []decideTest{
		{
			name: "flipped and flipped back unseen: the revision is dropped, the wait starts again, and a migration follows it",
			in:   Input{Now: now, State: migrated(), CRD: back, Fingerprint: at5, SettleDelay: settle, DrainMargin: drain},
			want: Decision{Status: recorded(status(t0, "B", "B", "A", unknown), at5, now, ""), RequeueAfter: wait},
		},
		{
			name: "flipped and flipped back unseen, storedVersions cut to the storage version since (kube-controller-manager's migrator): any version may be stored",
			in: Input{Now: now, State: migrated(), CRD: &CRDStorage{Generation: 5, StorageHash: "B"}, Fingerprint: at5,
				SettleDelay: settle, DrainMargin: drain},
			want: Decision{Status: recorded(status(t0, "B", "B", unknown), at5, now, ""), RequeueAfter: wait},
		},
		{
			name: "and once it settled and drained, a migration, though storedVersions list the storage version alone",
			in: Input{Now: now.Add(wait), State: withFingerprint(seen(state(t0, "B", "B", unknown), now), at5), CRD: &CRDStorage{Generation: 5, StorageHash: "B"},
				Fingerprint: at5, SettleDelay: settle, DrainMargin: drain},
			want: Decision{CreateMigrationFor: ptr("B"), RecordRevision: true},
		},
		{
			name: "a migration made for the storage before stops",
			in: Input{Now: now, State: migrated(), CRD: back, Fingerprint: at5, SettleDelay: settle, DrainMargin: drain,
				Migrations: []migrationv1alpha1.StorageVersionMigration{atGeneration(owned("at-3", "B", t0, ""), "3"), user("mine", t0, "", "")}},
			want: Decision{DeleteMigrations: []string{"at-3"}, Status: recorded(status(t0, "B", "B", "A", unknown), at5, now, "")},
		},
		{
			name: "a generation change alone (a flip and a flip back within one look, storedVersions not yet pruned): the same",
			in: Input{Now: now, State: withFingerprint(withRevision(seen(state(t0, "B", "B", "A"), t0), "100"), at3), CRD: back, Fingerprint: at5,
				SettleDelay: settle, DrainMargin: drain},
			want: Decision{Status: recorded(status(t0, "B", "B", "A", unknown), at5, now, ""), RequeueAfter: wait},
		},
		{
			name: "the new storage settled and drained: migrate, and record a revision for it",
			in: Input{Now: now.Add(wait), State: withFingerprint(seen(state(t0, "B", "B", "A"), now), at5), CRD: back, Fingerprint: at5,
				SettleDelay: settle, DrainMargin: drain},
			want: Decision{CreateMigrationFor: ptr("B"), RecordRevision: true},
		},
		{
			name: "not drained yet: wait out the rest",
			in: Input{Now: now.Add(settle), State: withFingerprint(seen(state(t0, "B", "B", "A"), now), at5), CRD: back, Fingerprint: at5,
				SettleDelay: settle, DrainMargin: drain},
			want: Decision{RequeueAfter: drain},
		},
		{
			name: "a storedVersions entry added by hand, at the same generation: a success from before cannot vouch, nothing is pruned",
			in: Input{Now: now, State: migrated(), CRD: &CRDStorage{Generation: 3, StorageHash: "B", StoredHashes: []string{"A"}}, Fingerprint: at3,
				SettleDelay: settle, DrainMargin: drain, Migrations: []migrationv1alpha1.StorageVersionMigration{atGeneration(owned("at-3", "B", t0, "ok"), "3")}},
			want: Decision{Status: recorded(status(t0, "B", "B", "A"), at3, now, ""), RequeueAfter: wait},
		},
		{
			name: "the CRD created again under its name, unseen, storedVersions its storage version alone: any version may be stored, the wait starts again",
			in: Input{Now: now, State: migrated(), CRD: &CRDStorage{Generation: 1, StorageHash: "B"}, Fingerprint: "crd=u2/1/v2",
				SettleDelay: settle, DrainMargin: drain},
			want: Decision{Status: recorded(status(t0, "B", "B", "Unknown"), "crd=u2/1/v2", now, ""), RequeueAfter: wait},
		},
		{
			name: "and once it settled and drained, a migration",
			in: Input{Now: now.Add(wait), State: withFingerprint(seen(state(t0, "B", "B", "Unknown"), now), "crd=u2/1/v2"), CRD: &CRDStorage{Generation: 1, StorageHash: "B"},
				Fingerprint: "crd=u2/1/v2", SettleDelay: settle, DrainMargin: drain},
			want: Decision{CreateMigrationFor: ptr("B"), RecordRevision: true},
		},
		{
			name: "storedVersions pruned: the same storage, the revision stays",
			in: Input{Now: now, State: withFingerprint(withRevision(seen(state(t0, "B", "B"), t0), "100"), at3),
				CRD: &CRDStorage{Generation: 3, StorageHash: "B"}, Fingerprint: at3},
			want: Decision{},
		},
		{
			name: "a state svm recorded no fingerprint on adopts one, with a new wait, and stops nothing",
			in: Input{Now: now, State: withRevision(seen(state(t0, "B", "B", "A"), t0), "100"), CRD: &CRDStorage{Generation: 3, StorageHash: "B", StoredHashes: []string{"A"}},
				Fingerprint: at3, SettleDelay: settle, DrainMargin: drain,
				Migrations: []migrationv1alpha1.StorageVersionMigration{atGeneration(owned("at-3", "B", t0, ""), "3")}},
			want: Decision{Status: recorded(status(t0, "B", "B", "A"), at3, now, "")},
		},
		{
			name: "first sight records the storage seen",
			in:   Input{Now: now, Observed: ptr("B"), CRD: &CRDStorage{Generation: 3, StorageHash: "B"}, Fingerprint: at3, SettleDelay: settle, DrainMargin: drain},
			want: Decision{CreateState: true, Status: recorded(status(now, "B", unknown), at3, now, ""), RequeueAfter: wait},
		},
		{
			name: "a storage version change records the storage seen, and waits for it to settle and drain",
			in: Input{Now: now, State: migrated(), CRD: &CRDStorage{Generation: 4, StorageHash: "A", StoredHashes: []string{"B"}},
				Fingerprint: "crd=u1/4/v1", SettleDelay: settle, DrainMargin: drain},
			want: Decision{Status: recorded(status(t0, "A", "B", "A"), "crd=u1/4/v1", now, ""), RequeueAfter: wait},
		},
		{
			name: "the CRD's storage version prevails over a discovery that has not taken it up",
			in: Input{Now: now, Observed: ptr("B"), State: withFingerprint(seen(state(t0, "A", "A"), t0), "crd=u1/6/v1"),
				CRD: &CRDStorage{Generation: 6, StorageHash: "A"}, Fingerprint: "crd=u1/6/v1"},
			want: Decision{Status: recorded(status(now, "A", "A"), "crd=u1/6/v1", t0, "")},
		},
	})
}

// TestDecideSpecChangeLeavesStorage: a CRD's spec changes without its
// storage version (a conversion webhook's caBundle rotated), at v2 ("B")
// since generation 3. Seen one generation after another (the fingerprint's
// run goes on), nothing of the storage changes: svm's migrations go on,
// the wait is not restarted, the revision stays, and a migration made at
// an earlier generation of the run still vouches for the prune. A
// generation svm did not see (a gap of two) may have hidden a flip and a
// flip back: that is a storage move.
func TestDecideSpecChangeLeavesStorage(t *testing.T) {
	const (
		at5    = "crd=u1/3..5/v2"
		at6    = "crd=u1/3..6/v2"
		gap7   = "crd=u1/7/v2"
		settle = 30 * time.Second
		drain  = 60 * time.Second
	)
	now := t0.Add(time.Hour)
	behind := &CRDStorage{Generation: 6, StorageHash: "B", StoredHashes: []string{"A"}}
	recordedAt5 := func() *migrationv1alpha1.StorageState {
		return withFingerprint(withRevision(seen(state(t0, "B", "B", "A"), t0), "100"), at5)
	}
	in := func(fp string, crd *CRDStorage, ms ...migrationv1alpha1.StorageVersionMigration) Input {
		return Input{Now: now, State: recordedAt5(), CRD: crd, Fingerprint: fp, Migrations: ms, SettleDelay: settle, DrainMargin: drain}
	}
	running := atGeneration(owned("at-4", "B", t0.Add(time.Minute), ""), "4")
	checkDecide(t, []decideTest{
		{
			name: "the next generation, same storage version: the fingerprint recorded, the migration goes on, since and revision kept",
			in:   in(at6, behind, running),
			want: Decision{Status: recorded(status(t0, "B", "B", "A"), at6, t0, "100")},
		},
		{
			name: "a success made at an earlier generation of the run refines and prunes",
			in:   in(at6, behind, atGeneration(owned("at-4", "B", t0.Add(time.Minute), "ok"), "4")),
			want: Decision{Status: recorded(status(t0, "B", "B"), at6, t0, "100"), PruneStoredVersions: true},
		},
		{
			name: "a success made before the run began cannot vouch: a new migration",
			in:   in(at6, behind, atGeneration(owned("at-2", "B", t0.Add(time.Minute), "ok"), "2")),
			want: Decision{Status: recorded(status(t0, "B", "B", "A"), at6, t0, "100"), CreateMigrationFor: ptr("B")},
		},
		{
			name: "generations unseen in between: the migration stops, the revision is dropped, the wait starts again, any version may be stored",
			in:   in(gap7, &CRDStorage{Generation: 7, StorageHash: "B", StoredHashes: []string{"A"}}, running),
			want: Decision{DeleteMigrations: []string{"at-4"}, Status: recorded(status(t0, "B", "B", "A", unknown), gap7, now, "")},
		},
		{
			name: "a spec change while the storage settles does not restart the wait",
			in: Input{Now: now.Add(settle), State: withFingerprint(seen(state(t0, "B", "B", "A"), now), at5),
				CRD: behind, Fingerprint: at6, SettleDelay: settle, DrainMargin: drain},
			want: Decision{Status: recorded(status(t0, "B", "B", "A"), at6, now, ""), RequeueAfter: drain},
		},
		{
			name: "a fingerprint recorded before epochs, and the next generation",
			in: Input{Now: now, State: withFingerprint(withRevision(seen(state(t0, "B", "B"), t0), "100"), "crd=u1/5/v2"),
				CRD: &CRDStorage{Generation: 6, StorageHash: "B"}, Fingerprint: "crd=u1/5..6/v2", Migrations: []migrationv1alpha1.StorageVersionMigration{running}},
			want: Decision{Status: recorded(status(t0, "B", "B"), "crd=u1/5..6/v2", t0, "100")},
		},
	})
}

// leaving is m having left n managedFields entries, refused by a webhook.
func leaving(m migrationv1alpha1.StorageVersionMigration, n int64) migrationv1alpha1.StorageVersionMigration {
	m.Status.Progress.ManagedFieldsLeft = &migrationv1alpha1.ManagedFieldsLeft{Denied: n}
	return m
}

func TestDecidePruneHeld(t *testing.T) {
	crd := &CRDStorage{Generation: 3, StoredHashes: []string{"A"}}
	base, maxDelay := 5*time.Minute, time.Hour
	// A migration made at t0 ends at t0+1m.
	heldBy := func(name string, created time.Time) migrationv1alpha1.StorageVersionMigration {
		return leaving(atGeneration(owned(name, "B", created, "ok"), "3"), 20)
	}
	hold := func(migration string, since time.Time) *migrationv1alpha1.PruneHold {
		return &migrationv1alpha1.PruneHold{
			Reason: migrationv1alpha1.PruneHeldManagedFieldsLeft, Entries: 20, Migration: migration, Since: ptr(metav1.NewTime(since)),
			Message: HoldMessage(&migrationv1alpha1.ManagedFieldsLeft{Denied: 20}),
		}
	}
	heldState := func(migration string, since time.Time) *migrationv1alpha1.StorageState {
		s := state(t0, "B", "B", "A")
		s.Status.PruneHeld = hold(migration, since)
		return s
	}
	withHold := func(st *migrationv1alpha1.StorageStateStatus, h *migrationv1alpha1.PruneHold) *migrationv1alpha1.StorageStateStatus {
		st.PruneHeld = h
		return st
	}
	in := func(now time.Time, s *migrationv1alpha1.StorageState, ms ...migrationv1alpha1.StorageVersionMigration) Input {
		return Input{Now: now, State: s, CRD: crd, Migrations: ms, RetryBase: base, RetryMax: maxDelay}
	}
	checkDecide(t, []decideTest{
		{
			name: "every object rewritten but entries left naming A: no prune, the hold recorded, a new try after the retry delay",
			in:   in(t0.Add(2*time.Minute), state(t0, "B", "B", "A"), heldBy("first", t0)),
			want: Decision{Status: withHold(status(t0, "B", "B", "A"), hold("first", t0.Add(2*time.Minute))), RequeueAfter: 4 * time.Minute},
		},
		{
			name: "the hold already recorded: nothing written, still waiting",
			in:   in(t0.Add(3*time.Minute), heldState("first", t0.Add(2*time.Minute)), heldBy("first", t0)),
			want: Decision{RequeueAfter: 3 * time.Minute},
		},
		{
			name: "the delay over: a new migration, the hold kept",
			in:   in(t0.Add(6*time.Minute), heldState("first", t0.Add(2*time.Minute)), heldBy("first", t0)),
			want: Decision{CreateMigrationFor: ptr("B"), RecordRevision: true},
		},
		{
			name: "the new one under way: wait for it",
			in: in(t0.Add(7*time.Minute), heldState("first", t0.Add(2*time.Minute)),
				heldBy("first", t0), atGeneration(owned("second", "B", t0.Add(6*time.Minute), ""), "3")),
			want: Decision{},
		},
		{
			name: "the new one left entries too: the delay doubles from its end, the hold names it, since the first",
			in: in(t0.Add(8*time.Minute), heldState("first", t0.Add(2*time.Minute)),
				heldBy("first", t0), heldBy("second", t0.Add(6*time.Minute))),
			want: Decision{Status: withHold(status(t0, "B", "B", "A"), hold("second", t0.Add(2*time.Minute))), RequeueAfter: 9 * time.Minute},
		},
		{
			name: "the new one failed: it backs off as failures do, not at once after the held one's delay",
			in: in(t0.Add(8*time.Minute), heldState("first", t0.Add(2*time.Minute)),
				heldBy("first", t0), atGeneration(owned("second", "B", t0.Add(6*time.Minute), "failed"), "3")),
			want: Decision{RequeueAfter: 4 * time.Minute, Retry: true},
		},
		{
			name: "the new one moved every entry: refine, prune, the hold gone",
			in: in(t0.Add(8*time.Minute), heldState("first", t0.Add(2*time.Minute)),
				heldBy("first", t0), atGeneration(owned("second", "B", t0.Add(6*time.Minute), "ok"), "3")),
			want: Decision{Status: status(t0, "B", "B"), PruneStoredVersions: true},
		},
		{
			name: "entries left when the CRD lists nothing else to prune: nothing held",
			in: Input{Now: t0.Add(2 * time.Minute), State: state(t0, "B", "A", "B"), CRD: &CRDStorage{Generation: 3},
				Migrations: []migrationv1alpha1.StorageVersionMigration{leaving(user("mine", t0, "ok", "B"), 3)}},
			want: Decision{Status: status(t0, "B", "B")},
		},
	})
}
