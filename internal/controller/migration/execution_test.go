package migration

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/followup"
	"github.com/svm-project/svm/internal/operation"
	"github.com/svm-project/svm/internal/scheme"
)

// fingerprints answers each read with the next fingerprint, the last one
// for ever, and each read of the recorded revision with since.
type fingerprints struct {
	seq        []Fingerprint
	reads      int
	since      *operation.StoredSince
	sinceReads int
}

func (f *fingerprints) StoredSince(context.Context, schema.GroupResource, Reading) *operation.StoredSince {
	f.sinceReads++
	return f.since
}

func (f *fingerprints) Read(context.Context, schema.GroupResource) (Reading, error) {
	fp := f.seq[min(f.reads, len(f.seq)-1)]
	f.reads++
	return Reading{Fingerprint: fp}, nil
}

func (f *fingerprints) ReadAfter(ctx context.Context, gr schema.GroupResource) (Reading, error) {
	return f.Read(ctx, gr)
}

// recordingExecutor rewrites nothing and succeeds, remembering each run.
type recordingExecutor struct{ runs []Run }

func (e *recordingExecutor) Execute(_ context.Context, run Run) (operation.RunResult, error) {
	e.runs = append(e.runs, run)
	return operation.RunResult{}, nil
}

// executed runs m once, as a scheduled run does, with the guard reading
// fps, and returns the migration saved, the runs, and the events.
func executed(t *testing.T, m *migrationv1alpha1.StorageVersionMigration, fps ...Fingerprint) (*migrationv1alpha1.StorageVersionMigration, []Run, string) {
	t.Helper()
	return executedWith(t, m, &fingerprints{seq: fps})
}

// executedWith is executed with the guard g.
func executedWith(t *testing.T, m *migrationv1alpha1.StorageVersionMigration, g *fingerprints) (*migrationv1alpha1.StorageVersionMigration, []Run, string) {
	t.Helper()
	cl := fake.NewClientBuilder().WithScheme(scheme.Scheme).
		WithStatusSubresource(&migrationv1alpha1.StorageVersionMigration{}).
		WithObjects(m).Build()
	rec := events.NewFakeRecorder(10)
	r := &Reconciler{Client: cl, Guard: g, Recorder: rec, Clock: clocktesting.NewFakeClock(t0)}
	r.setDefaults()
	if err := cl.Get(t.Context(), client.ObjectKeyFromObject(m), m); err != nil {
		t.Fatal(err)
	}
	ex := &recordingExecutor{}
	// As the scheduler does when the run's goroutine returns.
	r.settle(t.Context(), []ending{r.execute(t.Context(), m.DeepCopy(), ex)})
	var saved migrationv1alpha1.StorageVersionMigration
	if err := cl.Get(t.Context(), client.ObjectKeyFromObject(m), &saved); err != nil {
		t.Fatal(err)
	}
	close(rec.Events)
	var notes []string
	for e := range rec.Events {
		notes = append(notes, e)
	}
	return &saved, ex.runs, strings.Join(notes, "\n")
}

// stopped is a migration of widgets that ran before, under fingerprint,
// and saved its progress.
func stopped(fingerprint string) *migrationv1alpha1.StorageVersionMigration {
	m := mig("widgets", "widgets", 1, migrationv1alpha1.MigrationRunning)
	m.UID = "uid-widgets"
	m.Spec.Resource.Group = "example.com"
	m.Spec.ContinueToken = "token"
	m.Status.ResourceVersionCheckpoint = "100"
	m.Status.Progress.Listed = 50
	m.Status.StorageFingerprint = fingerprint
	return &m
}

func runningCondition(m *migrationv1alpha1.StorageVersionMigration) migrationv1alpha1.MigrationCondition {
	c := condition(&m.Status, migrationv1alpha1.MigrationRunning)
	if c.Status != corev1.ConditionTrue {
		return migrationv1alpha1.MigrationCondition{}
	}
	return c
}

func TestExecuteWaitsWhileServersDisagree(t *testing.T) {
	saved, runs, notes := executed(t, stopped("storageversion=10"), Fingerprint{Value: "storageversion=11", Disagreement: disagree})
	if len(runs) != 0 {
		t.Errorf("the objects were rewritten %d times while API servers disagree", len(runs))
	}
	if c := runningCondition(saved); c.Reason != ReasonStorageVersionsDisagree || c.Message != disagree+"; waiting for them to agree" {
		t.Errorf("Running condition %+v, want reason %s saying it waits", c, ReasonStorageVersionsDisagree)
	}
	if saved.Status.StorageFingerprint != "storageversion=10" || saved.Status.Progress.Listed != 50 {
		t.Errorf("fingerprint %q, %d objects listed: want the saved start and progress kept", saved.Status.StorageFingerprint, saved.Status.Progress.Listed)
	}
	if !strings.Contains(notes, "Warning "+ReasonRetrying) {
		t.Errorf("events %q: want a retry announced", notes)
	}
}

func TestExecuteResumesOnTheSameStorageVersion(t *testing.T) {
	fp := Fingerprint{Value: "storageversion=10"}
	saved, runs, notes := executed(t, stopped(fp.Value), fp)
	if len(runs) != 1 || runs[0].Resume == nil || runs[0].Resume.ContinueToken != "token" {
		t.Fatalf("runs %+v: want one, resumed from the saved token", runs)
	}
	if !saved.HasCondition(migrationv1alpha1.MigrationSucceeded) || saved.Status.StorageFingerprint != fp.Value {
		t.Errorf("status %+v: want Succeeded with fingerprint %q", saved.Status, fp.Value)
	}
	if !strings.Contains(notes, "Normal "+ReasonResumed) || !strings.Contains(notes, "Normal "+ReasonAllObjectsRewritten) {
		t.Errorf("events %q: want Resumed, then AllObjectsRewritten", notes)
	}
}

func TestExecuteStartsOverWhenChangedWhileStopped(t *testing.T) {
	now := Fingerprint{Value: "storageversion=11"}
	saved, runs, notes := executed(t, stopped("storageversion=10"), now)
	if len(runs) != 1 || runs[0].Resume != nil {
		t.Fatalf("runs %+v: want one, from the start", runs)
	}
	if !saved.HasCondition(migrationv1alpha1.MigrationSucceeded) || saved.Status.StorageFingerprint != now.Value {
		t.Errorf("status %+v: want Succeeded with the new fingerprint %q", saved.Status, now.Value)
	}
	if saved.Spec.ContinueToken != "" {
		t.Errorf("continue token %q: want the old one dropped", saved.Spec.ContinueToken)
	}
	if !strings.Contains(notes, "Warning "+ReasonStorageVersionChanged+" The storage version may have changed since the migration started: starting over") {
		t.Errorf("events %q: want the start over announced", notes)
	}
}

func TestExecuteStartsOverWhenChangedWhileRunning(t *testing.T) {
	m := stopped("")
	m.Status.ResourceVersionCheckpoint = ""
	saved, runs, notes := executed(t, m, Fingerprint{Value: "storageversion=10"}, Fingerprint{Value: "storageversion=11"})
	if len(runs) != 1 {
		t.Fatalf("%d runs, want 1", len(runs))
	}
	if saved.HasCondition(migrationv1alpha1.MigrationSucceeded) {
		t.Fatal("succeeded although the storage version changed while it ran")
	}
	const why = "the storage version may have changed while the migration ran"
	if c := runningCondition(saved); c.Reason != ReasonStorageVersionChanged || c.Message != why+"; starting over" {
		t.Errorf("Running condition %+v, want reason %s saying it starts over", c, ReasonStorageVersionChanged)
	}
	if saved.Status.StorageFingerprint != "" || saved.Status.Progress != (migrationv1alpha1.MigrationProgress{}) {
		t.Errorf("fingerprint %q, progress %+v: want both forgotten, to be read afresh", saved.Status.StorageFingerprint, saved.Status.Progress)
	}
	if !strings.Contains(notes, "Warning "+ReasonStorageVersionChanged+" "+why+": starting over") {
		t.Errorf("events %q: want the start over announced", notes)
	}
}

// Only the trigger's migrations skip what was written since the storage
// change; a user's may be a re-encryption, and must not even read it.
func TestExecuteSkipsWrittenSinceOnlyForTheTriggersMigrations(t *testing.T) {
	since := &operation.StoredSince{Hash: "h2", Revision: "90"}
	fp := Fingerprint{Value: "storageversion=10"}
	owned := stopped(fp.Value)
	owned.Labels = map[string]string{followup.CreatedByLabel: followup.TriggerValue}
	owned.Annotations = map[string]string{followup.StorageVersionHashAnnotation: "h2"}
	for _, tc := range []struct {
		name      string
		m         *migrationv1alpha1.StorageVersionMigration
		want      *operation.StoredSince
		wantReads int
	}{
		{"the trigger's", owned, since, 1},
		{"a user's", stopped(fp.Value), nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &fingerprints{seq: []Fingerprint{fp}, since: since}
			_, runs, _ := executedWith(t, tc.m, g)
			if len(runs) != 1 || runs[0].StoredSince != tc.want {
				t.Fatalf("runs %+v: want one, skipping since %+v", runs, tc.want)
			}
			if g.sinceReads != tc.wantReads {
				t.Errorf("the recorded revision was read %d times, want %d", g.sinceReads, tc.wantReads)
			}
		})
	}
}

func TestExecuteWithoutGuardSucceeds(t *testing.T) {
	cl := fake.NewClientBuilder().WithScheme(scheme.Scheme).
		WithStatusSubresource(&migrationv1alpha1.StorageVersionMigration{}).
		WithObjects(stopped("")).Build()
	r := &Reconciler{Client: cl, Clock: clocktesting.NewFakeClock(t0)}
	r.setDefaults()
	var m migrationv1alpha1.StorageVersionMigration
	if err := cl.Get(t.Context(), client.ObjectKey{Name: "widgets"}, &m); err != nil {
		t.Fatal(err)
	}
	end := r.execute(t.Context(), &m, &recordingExecutor{})
	if !end.final || end.retry != nil {
		t.Errorf("the run ended %+v, want for good", end)
	}
	r.settle(t.Context(), []ending{end})
	if err := cl.Get(t.Context(), client.ObjectKey{Name: "widgets"}, &m); err != nil {
		t.Fatal(err)
	}
	if !m.HasCondition(migrationv1alpha1.MigrationSucceeded) || m.Status.CompletionTime == nil || !m.Status.CompletionTime.Equal(&metav1.Time{Time: t0}) {
		t.Errorf("status %+v: want Succeeded at the clock's time", m.Status)
	}
	if !r.ended[m.UID] {
		t.Error("the run's end is not remembered for the scheduler")
	}
}

// abandoningExecutor is a recordingExecutor that hands over and records
// what it is asked to abandon.
type abandoningExecutor struct {
	recordingExecutor
	abandoned []string
}

func (e *abandoningExecutor) Abandon(_ context.Context, m *migrationv1alpha1.StorageVersionMigration) error {
	e.abandoned = append(e.abandoned, m.Name)
	return nil
}

// The CRD's StorageMigrating condition is settled only once the guard has
// decided, with the generation the run started at; an in-tree migration
// handed over for a run that proves nothing is abandoned.
func TestExecuteSettlesTheCRDAfterTheGuard(t *testing.T) {
	const start, flipped = "crd=uid-1/3/v2", "crd=uid-1/4/v1"
	for _, tc := range []struct {
		name          string
		inTree        string
		saved         string
		fps           []string
		wantEnd       runEnd
		wantAbandoned int
		wantSucceeded bool
	}{
		{name: "the guard holds", fps: []string{start, start}, wantEnd: endSucceeded, wantSucceeded: true},
		{name: "the guard voids the run", fps: []string{start, flipped}, wantEnd: endStartedOver},
		{name: "the guard voids a handed-over run", inTree: "widgets", fps: []string{start, flipped}, wantEnd: endStartedOver, wantAbandoned: 1},
		{name: "the storage moved since a hand-over", inTree: "widgets", saved: "crd=uid-1/2/v1", fps: []string{start, start}, wantEnd: endSucceeded, wantAbandoned: 1, wantSucceeded: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := stopped(tc.saved)
			m.Status.ResourceVersionCheckpoint = ""
			m.Status.InTreeMigration = tc.inTree
			cl := fake.NewClientBuilder().WithScheme(scheme.Scheme).WithStatusSubresource(&migrationv1alpha1.StorageVersionMigration{}).WithObjects(m).Build()
			g := &fingerprints{}
			for _, v := range tc.fps {
				g.seq = append(g.seq, Fingerprint{Value: v})
			}
			r := &Reconciler{Client: cl, Guard: g, Clock: clocktesting.NewFakeClock(t0)}
			r.setDefaults()
			if err := cl.Get(t.Context(), client.ObjectKeyFromObject(m), m); err != nil {
				t.Fatal(err)
			}
			ex := &abandoningExecutor{}
			e := r.newExecution(t.Context(), m, ex)
			e.run(t.Context())
			if e.crdEnd != tc.wantEnd || e.generation != 3 {
				t.Errorf("the CRD settled as %d at generation %d, want %d at 3 (the run's start)", e.crdEnd, e.generation, tc.wantEnd)
			}
			if len(ex.runs) != 1 || ex.runs[0].Generation != 3 || ex.runs[0].CRD != &e.crd {
				t.Errorf("runs %+v: want one, started at generation 3, with the run's CRD mark", ex.runs)
			}
			if len(ex.abandoned) != tc.wantAbandoned {
				t.Errorf("abandoned %v, want %d", ex.abandoned, tc.wantAbandoned)
			}
			if got := e.end.final; got != tc.wantSucceeded {
				t.Errorf("ended for good: %v, want %v", got, tc.wantSucceeded)
			}
		})
	}
}
