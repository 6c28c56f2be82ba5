package trigger

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/fingerprint"
)

// world is a model cluster: the storage hash the API server really uses,
// the StorageState and the migrations, driven by Decide as the controller
// drives it.
//
// With crd set, the resource is a custom resource, and svm reads its CRD
// at every look: every change of the storage version moves the CRD's
// generation, adds the new version to its storedVersions (as the API
// server does) and may have left objects in any version the storage had
// since the last migration, a flip and a flip back between two looks
// included; a prune cuts storedVersions to the storage version.
type world struct {
	now        time.Time
	actual     string
	state      *migrationv1alpha1.StorageState
	migrations []migrationv1alpha1.StorageVersionMigration
	started    map[string]bool
	seq        int

	crd        bool
	generation int
	stored     []string
	// changed is when the storage version last changed; looked, that
	// svm decided in the last step.
	changed time.Time
	looked  bool
	// epochs is what svm's process has seen of the CRD's generations
	// (internal/fingerprint): every look and every guard reads through
	// it, and a restart forgets it.
	epochs *fingerprint.Epochs
}

// fingerprint reads the CRD's fingerprint, as the trigger and the guard
// do, after teaching the process what svm recorded.
func (w *world) fingerprint() string {
	if !w.crd {
		return ""
	}
	if w.state != nil {
		w.epochs.Learn(w.state.Status.StorageFingerprint)
	}
	for _, m := range w.migrations {
		w.epochs.Learn(m.Status.StorageFingerprint)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{UID: "u", Generation: int64(w.generation)}}
	crd.Spec.Versions = []apiextensionsv1.CustomResourceDefinitionVersion{{Name: w.actual, Storage: true}}
	return w.epochs.Of(crd, nil).Value
}

const window = 10 * time.Minute

func (w *world) decide(observed *string) {
	w.looked = true
	in := Input{Now: w.now, Observed: observed, State: w.state, Migrations: w.migrations, RetryBase: time.Minute, RetryMax: 8 * time.Minute}
	if w.crd {
		in.CRD = &CRDStorage{Generation: int64(w.generation), StorageHash: w.actual,
			StoredHashes: slices.DeleteFunc(slices.Clone(w.stored), func(h string) bool { return h == w.actual })}
		in.Fingerprint = w.fingerprint()
		in.SettleDelay, in.DrainMargin = 15*time.Second, 2*time.Minute
	}
	d := Decide(in)
	if d.PruneStoredVersions {
		w.stored = []string{w.actual}
	}
	w.migrations = slices.DeleteFunc(w.migrations, func(m migrationv1alpha1.StorageVersionMigration) bool {
		return slices.Contains(d.DeleteMigrations, m.Name)
	})
	if d.CreateState {
		w.state = &migrationv1alpha1.StorageState{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(w.now)}}
	}
	if d.Status != nil {
		w.state.Status = *d.Status
	}
	if d.RecordRevision {
		// The controller reads the revision now: it stands for this time.
		w.state.Status.CurrentStorageVersionRevision = strconv.FormatInt(w.now.Unix(), 10)
	}
	if d.CreateMigrationFor != nil {
		w.seq++
		m := owned(fmt.Sprintf("m%d", w.seq), *d.CreateMigrationFor, w.now, "")
		m.Status.StorageVersionHash = ""
		if w.crd {
			m.Annotations[CRDGenerationAnnotation] = fmt.Sprint(w.generation)
		}
		w.migrations = append(w.migrations, m)
	}
}

// step applies one event chosen by op.
func (w *world) step(op byte) {
	hashes := []string{"A", "B", "C"}
	switch op % 9 {
	case 0:
		if w.crd && (op/9)%2 == 1 {
			// A tool adds a version to the CRD's storedVersions: objects
			// may be stored in it.
			if h := hashes[int(op/18)%3]; !slices.Contains(w.stored, h) {
				w.stored = append(w.stored, h)
				w.changed = w.now
			}
			return
		}
		fallthrough
	case 1: // the API server's storage version changes (or, for a CRD, is set to what it is)
		before := w.actual
		w.actual = hashes[int(op/9)%3]
		if w.crd {
			w.generation++
			if w.actual != before {
				w.changed = w.now
			}
			if !slices.Contains(w.stored, w.actual) {
				w.stored = append(w.stored, w.actual)
			}
		}
	case 2: // a discovery round
		h := w.actual
		w.decide(&h)
	case 3: // a discovery round that did not answer for this resource
		w.decide(nil)
	case 4: // the oldest waiting migration starts and records the hash it migrates to
		for i := range w.migrations {
			if m := &w.migrations[i]; !w.started[m.Name] {
				w.started[m.Name] = true
				m.Status.StorageFingerprint = w.fingerprint()
				m.Status.StorageVersionHash = w.actual
				break
			}
		}
	case 5, 6: // the oldest started migration ends
		for i := range w.migrations {
			if m := &w.migrations[i]; w.started[m.Name] && !m.IsFinished() {
				if !fingerprint.SameStorage(m.Status.StorageFingerprint, w.fingerprint()) {
					// The storage changed while it ran: it starts over.
					w.started[m.Name] = false
					break
				}
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
		w.epochs = fingerprint.NewEpochs()
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
// and no migration of svm's for another hash may be under way. For a
// custom resource, whose CRD svm reads at every look, the migration must
// also have been made since the storage version last changed: objects
// written before may be in any version the storage had.
func (w *world) check(t *testing.T, ops []byte) {
	if w.state == nil || w.crd && !w.looked {
		return
	}
	p := w.state.Status.PersistedStorageVersionHashes
	if len(p) != 1 || p[0] == migrationv1alpha1.UnknownStorageVersionHash {
		return
	}
	x := p[0]
	w.checkRevision(t, ops)
	if x != w.state.Status.CurrentStorageVersionHash {
		t.Fatalf("ops %v: persisted [%s] but current %s", ops, x, w.state.Status.CurrentStorageVersionHash)
	}
	proved := false
	for i := range w.migrations {
		m := &w.migrations[i]
		if IsOwned(m) && TargetHash(m) != x && !m.IsFinished() {
			t.Fatalf("ops %v: persisted [%s] while migration %s for %s is unfinished", ops, x, m.Name, TargetHash(m))
		}
		if m.HasCondition(migrationv1alpha1.MigrationSucceeded) && m.Status.StorageVersionHash == x && (!w.crd || !m.CreationTimestamp.Time.Before(w.changed)) {
			proved = true
		}
	}
	if !proved {
		t.Fatalf("ops %v (crd %v): persisted [%s] with no successful migration that stored %s since the storage last changed", ops, w.crd, x, x)
	}
}

// checkRevision: for a custom resource, a revision the state records after
// a look must have been read since the storage version last changed, or
// objects written in between would be skipped as current.
func (w *world) checkRevision(t *testing.T, ops []byte) {
	rev := w.state.Status.CurrentStorageVersionRevision
	if !w.crd || rev == "" {
		return
	}
	if at, _ := strconv.ParseInt(rev, 10, 64); at < w.changed.Unix() {
		t.Fatalf("ops %v: the state keeps a revision read at %s, before the storage last changed at %s", ops, time.Unix(at, 0).UTC(), w.changed.UTC())
	}
}

func runOps(t *testing.T, ops []byte) {
	for _, crd := range []bool{false, true} {
		w := &world{now: t0, actual: "A", started: map[string]bool{}, crd: crd, stored: []string{"A"}, epochs: fingerprint.NewEpochs()}
		for i, op := range ops {
			w.looked = false
			w.step(op)
			w.check(t, ops[:i+1])
		}
	}
}

// FuzzLifecycle explores sequences of storage flips, discovery rounds
// (answered or not), migration starts, successes, failures, time and
// restarts. `go test` runs the seeds; `go test -fuzz FuzzLifecycle` explores.
func FuzzLifecycle(f *testing.F) {
	f.Add([]byte{2, 4, 5})                         // first install, migrate, succeed
	f.Add([]byte{2, 4, 0 + 9, 2, 5, 4, 5})         // flip to B mid-migration
	f.Add([]byte{2, 4, 6, 7, 2, 4, 5})             // fail, retry later, succeed
	f.Add([]byte{2, 4, 5, 7 + 9*11, 8, 2, 4, 5})   // stale restart
	f.Add([]byte{2, 9, 2, 18, 2, 4, 5, 3, 4, 5})   // A -> B -> C
	f.Add([]byte{2, 4, 5, 7, 9, 0, 7, 2, 4, 5})    // A migrated, then B and back to A between two looks
	f.Add([]byte{2, 4, 5, 7, 9 + 9*2, 7, 2, 4, 5}) // A migrated, then B added to storedVersions by hand
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
