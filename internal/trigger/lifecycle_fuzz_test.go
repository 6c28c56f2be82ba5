package trigger

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
)

// world is a model cluster: the storage hash the API server really uses,
// the StorageState and the migrations, driven by Decide as the controller
// drives it.
type world struct {
	now        time.Time
	actual     string
	state      *migrationv1alpha1.StorageState
	migrations []migrationv1alpha1.StorageVersionMigration
	started    map[string]bool
	seq        int
}

const window = 10 * time.Minute

func (w *world) decide(observed *string) {
	d := Decide(Input{Now: w.now, Observed: observed, State: w.state, Migrations: w.migrations, RetryBase: time.Minute, RetryMax: 8 * time.Minute})
	w.migrations = slices.DeleteFunc(w.migrations, func(m migrationv1alpha1.StorageVersionMigration) bool {
		return slices.Contains(d.DeleteMigrations, m.Name)
	})
	if d.CreateState {
		w.state = &migrationv1alpha1.StorageState{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(w.now)}}
	}
	if d.Status != nil {
		w.state.Status = *d.Status
	}
	if d.CreateMigrationFor != nil {
		w.seq++
		m := owned(fmt.Sprintf("m%d", w.seq), *d.CreateMigrationFor, w.now, "")
		m.Status.StorageVersionHash = ""
		w.migrations = append(w.migrations, m)
	}
}

// step applies one event chosen by op.
func (w *world) step(op byte) {
	hashes := []string{"A", "B", "C"}
	switch op % 9 {
	case 0, 1: // the API server's storage version changes
		w.actual = hashes[int(op/9)%3]
	case 2: // a discovery round
		h := w.actual
		w.decide(&h)
	case 3: // a discovery round that did not answer for this resource
		w.decide(nil)
	case 4: // the oldest waiting migration starts and records the hash it migrates to
		for i := range w.migrations {
			if m := &w.migrations[i]; !w.started[m.Name] {
				w.started[m.Name] = true
				m.Status.StorageVersionHash = w.actual
				break
			}
		}
	case 5, 6: // the oldest started migration ends
		for i := range w.migrations {
			if m := &w.migrations[i]; w.started[m.Name] && !m.IsFinished() {
				typ := migrationv1alpha1.MigrationSucceeded
				if op%9 == 6 {
					typ = migrationv1alpha1.MigrationFailed
				}
				end := metav1.NewTime(w.now)
				m.Status.Conditions = []migrationv1alpha1.MigrationCondition{{Type: typ, Status: corev1.ConditionTrue}}
				m.Status.CompletionTime = &end
				break
			}
		}
		w.decide(nil) // the controller reacts to the migration's change
	case 7: // time passes
		w.now = w.now.Add(time.Duration(1+int(op/9)%12) * time.Minute)
	case 8: // svm restarts: a stale state is re-created as Unknown
		if w.state != nil && (op/9)%4 == 3 {
			// ...or svm crashed between creating a state and writing its status.
			w.state = &migrationv1alpha1.StorageState{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(w.now)}}
			return
		}
		if w.state != nil && IsStale(w.state, w.now, window) {
			reset := ResetStatus(w.state, w.now)
			w.state = &migrationv1alpha1.StorageState{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(w.now)}, Status: *reset}
		}
	}
}

// check is the safety property: a StorageState that claims every object is
// stored in one hash must have a migration that really stored that hash,
// and no migration of svm's for another hash may be under way.
func (w *world) check(t *testing.T, ops []byte) {
	if w.state == nil {
		return
	}
	p := w.state.Status.PersistedStorageVersionHashes
	if len(p) != 1 || p[0] == migrationv1alpha1.UnknownStorageVersionHash {
		return
	}
	x := p[0]
	if x != w.state.Status.CurrentStorageVersionHash {
		t.Fatalf("ops %v: persisted [%s] but current %s", ops, x, w.state.Status.CurrentStorageVersionHash)
	}
	proved := false
	for i := range w.migrations {
		m := &w.migrations[i]
		if IsOwned(m) && TargetHash(m) != x && !m.IsFinished() {
			t.Fatalf("ops %v: persisted [%s] while migration %s for %s is unfinished", ops, x, m.Name, TargetHash(m))
		}
		if m.HasCondition(migrationv1alpha1.MigrationSucceeded) && m.Status.StorageVersionHash == x {
			proved = true
		}
	}
	if !proved {
		t.Fatalf("ops %v: persisted [%s] with no successful migration that stored %s", ops, x, x)
	}
}

func runOps(t *testing.T, ops []byte) {
	w := &world{now: t0, actual: "A", started: map[string]bool{}}
	for i, op := range ops {
		w.step(op)
		w.check(t, ops[:i+1])
	}
}

// FuzzLifecycle explores sequences of storage flips, discovery rounds
// (answered or not), migration starts, successes, failures, time and
// restarts. `go test` runs the seeds; `go test -fuzz FuzzLifecycle` explores.
func FuzzLifecycle(f *testing.F) {
	f.Add([]byte{2, 4, 5})                       // first install, migrate, succeed
	f.Add([]byte{2, 4, 0 + 9, 2, 5, 4, 5})       // flip to B mid-migration
	f.Add([]byte{2, 4, 6, 7, 2, 4, 5})           // fail, retry later, succeed
	f.Add([]byte{2, 4, 5, 7 + 9*11, 8, 2, 4, 5}) // stale restart
	f.Add([]byte{2, 9, 2, 18, 2, 4, 5, 3, 4, 5}) // A -> B -> C
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 200 {
			ops = ops[:200]
		}
		runOps(t, ops)
	})
}

// TestLifecycleRandomSequences runs many random sequences on every test
// run, so the property is exercised beyond the fuzz seeds in CI.
func TestLifecycleRandomSequences(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		ops := make([]byte, 1+r.IntN(60))
		for i := range ops {
			ops[i] = byte(r.IntN(256))
		}
		runOps(t, ops)
	}
}
