package status

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
)

// fuzzInput reads an Input for Build from fuzz bytes. Numbers come from
// the whole int64 range when wide is set (anyone who may write a status
// may write any number), and from what a real cluster could hold
// otherwise; times are whole seconds, as the API stores them.
type fuzzInput struct {
	data []byte
	wide bool
}

func (f *fuzzInput) byte() byte {
	if len(f.data) == 0 {
		return 0
	}
	b := f.data[0]
	f.data = f.data[1:]
	return b
}

func (f *fuzzInput) pick(n int) int { return int(f.byte()) % n }

func (f *fuzzInput) count() int64 {
	var buf [8]byte
	for i := range buf {
		buf[i] = f.byte()
	}
	v := int64(binary.LittleEndian.Uint64(buf[:]))
	if f.wide {
		return v
	}
	// Up to 2^32 objects: far more than etcd can hold.
	return int64(uint64(v) % (1 << 32))
}

// offset is a time around now: up to about a year before or a week after
// (clocks disagree), or anywhere within 68 years when wide.
func (f *fuzzInput) offset() time.Duration {
	var buf [4]byte
	for i := range buf {
		buf[i] = f.byte()
	}
	s := int64(int32(binary.LittleEndian.Uint32(buf[:])))
	if !f.wide {
		s = s%(366*24*3600) - 7*24*3600*int64(f.pick(2))
		s = -s
	}
	return time.Duration(s) * time.Second
}

func (f *fuzzInput) time() metav1.Time { return metav1.NewTime(now.Add(f.offset())) }

func (f *fuzzInput) timePtr() *metav1.Time {
	if f.pick(3) == 0 {
		return nil
	}
	t := f.time()
	return &t
}

var (
	fuzzNames    = []string{"widgets", "secrets-4hq9d", "", "a-very-long-name-of-a-migration-that-goes-on-and-on-and-on-and-on"}
	fuzzReasons  = []string{"", "Started", "Retrying", "Forbidden", "ObjectsFailed", "AllObjectsRewritten"}
	fuzzMessages = []string{"", "list widgets: forbidden", "line one\nline two\twith a tab", strings.Repeat("long ", 400), "ünïcödé ✓ \u2028 \v\f\r"}
	fuzzHashes   = []string{"", migrationv1alpha1.UnknownStorageVersionHash, "xPOwRZ+Yhw8=", "8aSe+NMegvE="}
	fuzzStatuses = []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown}
	fuzzTypes    = []migrationv1alpha1.MigrationConditionType{migrationv1alpha1.MigrationRunning, migrationv1alpha1.MigrationSucceeded, migrationv1alpha1.MigrationFailed}
)

func (f *fuzzInput) input(extra string) Input {
	in := Input{Now: now, SVMServed: f.pick(4) != 0, InTreeServed: f.pick(2) == 0}
	messages := append(append([]string{}, fuzzMessages...), strings.ToValidUTF8(extra, "?"))
	for range f.pick(6) {
		m := migrationv1alpha1.StorageVersionMigration{
			ObjectMeta: metav1.ObjectMeta{Name: fuzzNames[f.pick(len(fuzzNames))], CreationTimestamp: f.time()},
			Spec:       migrationv1alpha1.StorageVersionMigrationSpec{Resource: migrationv1alpha1.GroupVersionResource{Group: []string{"", "example.com"}[f.pick(2)], Version: "v1", Resource: "widgets"}},
		}
		for range f.pick(4) {
			m.Status.Conditions = append(m.Status.Conditions, migrationv1alpha1.MigrationCondition{
				Type: fuzzTypes[f.pick(3)], Status: fuzzStatuses[f.pick(3)],
				Reason: fuzzReasons[f.pick(len(fuzzReasons))], Message: messages[f.pick(len(messages))],
			})
		}
		p := &m.Status.Progress
		p.Listed, p.Restored, p.AlreadyCurrent, p.WrittenSinceStart, p.Gone, p.Failed = f.count(), f.count(), f.count(), f.count(), f.count(), f.count()
		if f.pick(2) == 0 {
			r := f.count()
			p.RemainingEstimate = &r
		}
		m.Status.StartTime, m.Status.CompletionTime = f.timePtr(), f.timePtr()
		in.Migrations = append(in.Migrations, m)
	}
	for range f.pick(3) {
		m := storagemigrationv1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: fuzzNames[f.pick(len(fuzzNames))], CreationTimestamp: f.time()}}
		for range f.pick(3) {
			m.Status.Conditions = append(m.Status.Conditions, metav1.Condition{
				Type: string(fuzzTypes[f.pick(3)]), Status: metav1.ConditionStatus(fuzzStatuses[f.pick(3)]), Message: messages[f.pick(len(messages))],
			})
		}
		in.InTreeMigrations = append(in.InTreeMigrations, m)
	}
	for range f.pick(4) {
		s := migrationv1alpha1.StorageState{ObjectMeta: metav1.ObjectMeta{Name: fuzzNames[f.pick(len(fuzzNames))]}}
		s.Status.CurrentStorageVersionHash = fuzzHashes[f.pick(len(fuzzHashes))]
		for range f.pick(4) {
			s.Status.PersistedStorageVersionHashes = append(s.Status.PersistedStorageVersionHashes, fuzzHashes[f.pick(len(fuzzHashes))])
		}
		if f.pick(2) == 0 {
			s.Status.LastHeartbeatTime = f.time()
		}
		in.StorageStates = append(in.StorageStates, s)
	}
	return in
}

// stuckSeed is a migration stuck an hour after its first object, with
// 2^32-1 to go: a time left far beyond what a time.Duration holds.
func stuckSeed() []byte {
	var stuck []byte
	stuck = append(stuck, 1, 1, 1)                               // svm's API served, no in-tree API; one migration
	stuck = append(stuck, 0, 0x58, 0x02, 0, 0, 0, 1)             // "widgets", created 10 minutes ago, in example.com
	stuck = append(stuck, 1, 0, 0, 1, 0)                         // one condition: Running=True, Started
	stuck = append(stuck, 1, 0, 0, 0, 0, 0, 0, 0)                // listed 1
	stuck = append(stuck, 1, 0, 0, 0, 0, 0, 0, 0)                // restored 1
	stuck = append(stuck, make([]byte, 32)...)                   // already current, written since the start, gone and failed 0
	stuck = append(stuck, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0) // an estimate: 2^32-1 remaining
	stuck = append(stuck, 1, 0x10, 0x0e, 0, 0, 0, 0)             // started an hour ago, not completed
	return stuck
}

// FuzzBuild checks what `svm status` shows for any objects the server may
// hold: Build never panics nor changes the objects it is given, keeps
// every migration and state and orders them as documented, and every
// output format renders it (the JSON reads back the same, the table keeps
// one line per row). For what a real cluster could hold it also checks
// the numbers: no negative rate, total or time left, and a time left the
// table can show.
func FuzzBuild(f *testing.F) {
	f.Add([]byte{}, "", false)
	f.Add([]byte{1, 1, 5, 0, 10, 0, 0, 0, 3, 0, 0, 0, 0, 0, 9, 9, 9, 9, 9, 9, 9, 9}, "x", false)
	f.Add(bytes.Repeat([]byte{7, 3, 200, 1}, 40), "retrying\nafter a conflict", false)
	f.Add(bytes.Repeat([]byte{255, 1, 0, 128}, 60), "", true)
	f.Add(stuckSeed(), "", false)
	f.Fuzz(func(t *testing.T, data []byte, extra string, wide bool) {
		in := (&fuzzInput{data: data, wide: wide}).input(extra)
		// Cached objects must never be changed: compare against a copy.
		saved := Input{Now: in.Now, SVMServed: in.SVMServed, InTreeServed: in.InTreeServed}
		for i := range in.Migrations {
			saved.Migrations = append(saved.Migrations, *in.Migrations[i].DeepCopy())
		}
		for i := range in.InTreeMigrations {
			saved.InTreeMigrations = append(saved.InTreeMigrations, *in.InTreeMigrations[i].DeepCopy())
		}
		for i := range in.StorageStates {
			saved.StorageStates = append(saved.StorageStates, *in.StorageStates[i].DeepCopy())
		}
		r := Build(in)
		if diff := cmp.Diff(saved, in); diff != "" {
			t.Fatalf("Build changed its input (-before +after):\n%s", diff)
		}

		wantMigrations, wantStates := 0, 0
		if in.SVMServed {
			wantMigrations, wantStates = len(in.Migrations), len(in.StorageStates)
		}
		if in.InTreeServed {
			wantMigrations += len(in.InTreeMigrations)
		}
		if len(r.Migrations) != wantMigrations || len(r.StorageStates) != wantStates {
			t.Fatalf("Build kept %d migrations and %d states of %d and %d", len(r.Migrations), len(r.StorageStates), wantMigrations, wantStates)
		}
		for i, m := range r.Migrations {
			if _, ok := stateOrder[m.State]; !ok {
				t.Errorf("migration %q has state %q", m.Name, m.State)
			}
			if i > 0 {
				prev := r.Migrations[i-1]
				if stateOrder[prev.State] > stateOrder[m.State] ||
					stateOrder[prev.State] == stateOrder[m.State] && prev.CreationTimestamp.After(m.CreationTimestamp.Time) {
					t.Errorf("%s (%s) is listed before %s (%s)", prev.Name, prev.State, m.Name, m.State)
				}
			}
			if (m.Source == SourceSVM) != (m.Progress != nil) {
				t.Errorf("migration %q from %s has progress %v", m.Name, m.Source, m.Progress)
			}
			if m.ETASeconds != nil && m.State != StateRunning {
				t.Errorf("migration %q is %s but has a time left", m.Name, m.State)
			}
			if m.ObjectsPerSecond != nil && (math.IsNaN(*m.ObjectsPerSecond) || math.IsInf(*m.ObjectsPerSecond, 0)) {
				t.Errorf("migration %q has rate %v", m.Name, *m.ObjectsPerSecond)
			}
			if wide {
				continue
			}
			if m.ObjectsPerSecond != nil && *m.ObjectsPerSecond < 0 {
				t.Errorf("migration %q has a negative rate %v", m.Name, *m.ObjectsPerSecond)
			}
			if m.ETASeconds != nil && *m.ETASeconds < 0 {
				t.Errorf("migration %q has a negative time left %d", m.Name, *m.ETASeconds)
			}
			if m.ETASeconds != nil {
				// The table shows the time left, up to the longest a
				// time.Duration holds (292 years).
				longest := int64(math.MaxInt64 / int64(time.Second))
				want := duration.HumanDuration(time.Duration(min(*m.ETASeconds, longest)) * time.Second)
				if got := etaCell(m.ETASeconds); got != want {
					t.Errorf("migration %q: time left %d seconds shows as %q, want %q", m.Name, *m.ETASeconds, got, want)
				}
			}
			if p := m.Progress; p != nil && (p.Total < p.Listed || p.TotalKnown != (p.RemainingEstimate != nil || m.State == StateSucceeded || m.State == StateFailed)) {
				t.Errorf("migration %q: progress %+v in state %s", m.Name, *p, m.State)
			}
		}
		for _, s := range r.StorageStates {
			if s.Migrated && (len(s.PersistedStorageVersionHashes) != 1 || s.PersistedStorageVersionHashes[0] != s.CurrentStorageVersionHash ||
				s.CurrentStorageVersionHash == "" || s.CurrentStorageVersionHash == migrationv1alpha1.UnknownStorageVersionHash) {
				t.Errorf("storage state %q is migrated with current %q and persisted %v", s.Name, s.CurrentStorageVersionHash, s.PersistedStorageVersionHashes)
			}
		}
		if !strings.HasPrefix(Summary(r), "no migrations") && !strings.HasPrefix(Summary(r), strings.Fields(Summary(r))[0]+" migration") {
			t.Errorf("summary %q", Summary(r))
		}

		var js, yml, table bytes.Buffer
		if err := WriteJSON(&js, r); err != nil {
			t.Fatalf("WriteJSON: %v", err)
		}
		if err := WriteYAML(&yml, r); err != nil {
			t.Fatalf("WriteYAML: %v", err)
		}
		if err := WriteTable(&table, r); err != nil {
			t.Fatalf("WriteTable: %v", err)
		}
		var back Report
		if err := json.Unmarshal(js.Bytes(), &back); err != nil {
			t.Fatalf("the JSON does not read back: %v", err)
		}
		if diff := cmp.Diff(r, &back); diff != "" {
			t.Errorf("the JSON reads back differently (-built +read):\n%s", diff)
		}
		// One line per row: a header and the rows, or a "No ..." line, for
		// each table, and a blank line between them.
		want := max(1, len(r.Migrations)+min(1, len(r.Migrations)))
		if r.SVMAPIServed {
			want += 1 + max(1, len(r.StorageStates)+min(1, len(r.StorageStates)))
		}
		if got := strings.Count(table.String(), "\n"); got != want {
			t.Errorf("the table has %d lines, want %d:\n%s", got, want, table.String())
		}
	})
}
