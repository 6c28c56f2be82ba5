package badinput_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/wait"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/framework"
)

// twoMigrations creates two migrations of one resource at once. The
// controller runs one resource at a time whatever its --max-parallel (4
// here, so the wait is not for a free slot): the second stays pending
// (no condition) while the first runs, then runs and succeeds too. By
// then every object is in the current storage version, so the API server
// finds each of the second migration's writes unchanged and skips it: the
// second costs requests but no etcd write.
func (s *suite) twoMigrations(t *testing.T) {
	env := s.env
	r := framework.Resource{Group: "twice.example.com", Plural: "twicegadgets", Kind: "TwiceGadget"}
	const n = 300 // three seconds at the controller's --qps
	env.CreateResource(t, r)
	env.CreateObjects(t, r, []string{"badinput-twice"}, n)
	env.FlipStorage(t, r)
	before := env.TakeSnapshot(t, r.GVR("v1"))
	writesBefore := env.ServerWrites(t, r.Plural)

	s.env.CreateMigration(t, "twice-1", r.GVR("v1"))
	s.env.CreateMigration(t, "twice-2", r.GVR("v1"))
	sawWaiting := false
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		// twice-2 is read before twice-1: a finished migration stays
		// finished, so twice-1 unfinished after twice-2 was seen running
		// means they ran at once. Read the other way round, twice-1 could
		// finish and twice-2 start between the two reads.
		second := s.env.GetMigration(t, "twice-2")
		first := s.env.GetMigration(t, "twice-1")
		if second.HasCondition(migrationv1alpha1.MigrationRunning) && !first.IsFinished() {
			t.Errorf("twice-2 runs while twice-1 has not finished: %+v", first.Status.Conditions)
		}
		if first.HasCondition(migrationv1alpha1.MigrationRunning) && len(second.Status.Conditions) == 0 {
			sawWaiting = true
		}
		return first.IsFinished(), nil
	})
	if err != nil {
		t.Fatalf("twice-1 did not finish: %v", err)
	}
	if !sawWaiting {
		t.Error("never saw twice-2 pending while twice-1 ran")
	}
	first := s.env.GetMigration(t, "twice-1")
	if !first.HasCondition(migrationv1alpha1.MigrationSucceeded) || first.Status.Progress.Migrated() != n {
		t.Fatalf("twice-1: %+v, progress %+v; want Succeeded with %d rewritten", first.Status.Conditions, first.Status.Progress, n)
	}
	revisions := env.ModRevisions(t, r.EtcdPrefix())

	second := s.env.WaitMigration(t, "twice-2", 2*time.Minute, "finished", framework.Finished)
	if !second.HasCondition(migrationv1alpha1.MigrationSucceeded) || second.Status.Progress.Failed != 0 {
		t.Fatalf("twice-2: %+v, progress %+v; want Succeeded", second.Status.Conditions, second.Status.Progress)
	}
	if second.Status.StartTime.Before(first.Status.CompletionTime) {
		t.Errorf("twice-2 started at %s, before twice-1 completed at %s", second.Status.StartTime, first.Status.CompletionTime)
	}
	if diff := cmp.Diff(revisions, env.ModRevisions(t, r.EtcdPrefix())); diff != "" {
		t.Errorf("the second migration wrote to etcd (-after the first +after the second):\n%s", diff)
	}
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": n})
	env.ExpectUnchanged(t, r.GVR("v1"), before)
	writes := env.ServerWrites(t, r.Plural) - writesBefore
	if writes != 2*n {
		t.Errorf("%d write requests, want %d: one per object and migration", writes, 2*n)
	}
	t.Logf("twice-1 rewrote %d objects; twice-2 sent %d writes that changed no etcd revision", first.Status.Progress.Migrated(), second.Status.Progress.Migrated()+second.Status.Progress.Skipped())
	framework.Scenario{Name: "two migrations of one resource", Objects: n, Writes: writes, Retries: s.retries(t, r), Verified: !t.Failed()}.Report(t)
}
