package health

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	clocktesting "k8s.io/utils/clock/testing"
)

// memoryLock is a lease held in memory, as the API server would hold it.
type memoryLock struct {
	identity string
	record   *resourcelock.LeaderElectionRecord
}

func (l *memoryLock) Get(context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	raw, err := json.Marshal(l.record)
	return l.record, raw, err
}

func (l *memoryLock) Create(_ context.Context, r resourcelock.LeaderElectionRecord) error {
	l.record = &r
	return nil
}

func (l *memoryLock) Update(_ context.Context, r resourcelock.LeaderElectionRecord) error {
	l.record = &r
	return nil
}

func (l *memoryLock) RecordEvent(string) {}
func (l *memoryLock) Identity() string   { return l.identity }
func (l *memoryLock) Describe() string   { return "memory" }
func record(holder string, renew time.Time) *resourcelock.LeaderElectionRecord {
	return &resourcelock.LeaderElectionRecord{HolderIdentity: holder, LeaseDurationSeconds: 15, RenewTime: metav1.NewTime(renew)}
}

// TestFollowerReadiness follows a follower through what its elector reads:
// not ready before it has seen the lease, ready while the leader renews,
// not ready once the leader stops renewing, ready again once it leads.
func TestFollowerReadiness(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	tr := NewTracker(clk, true)
	shared := &memoryLock{identity: "me"}
	lock := tr.WrapLock(shared)
	ctx := t.Context()
	ready := func(leading bool) error { return Ready(tr.State(true, leading)) }

	expectError(t, ready(false), "no lease holder seen")
	shared.record = record("other", clk.Now())
	if _, _, err := lock.Get(ctx); err != nil {
		t.Fatal(err)
	}
	expectError(t, ready(false), "")

	// The leader renews every two seconds: the follower stays ready.
	for range 10 {
		clk.Step(2 * time.Second)
		shared.record = record("other", clk.Now())
		_, _, _ = lock.Get(ctx)
		expectError(t, ready(false), "")
	}
	// The leader stops renewing: the same record, read again and again,
	// expires a lease duration after it last changed.
	for range 8 {
		clk.Step(2 * time.Second)
		_, _, _ = lock.Get(ctx)
	}
	expectError(t, ready(false), "lease of other expired")

	// The follower takes over.
	if err := lock.Update(ctx, *record("me", clk.Now())); err != nil {
		t.Fatal(err)
	}
	expectError(t, ready(false), "leader not started yet")
	expectError(t, ready(true), "")
	expectError(t, Live(tr.State(true, true)), "")
}

// TestLeaderLiveness: a leader whose elector stops renewing fails liveness
// a lease duration after its last renewal.
func TestLeaderLiveness(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	tr := NewTracker(clk, true)
	lock := tr.WrapLock(&memoryLock{identity: "me"})
	if err := lock.Create(t.Context(), *record("me", clk.Now())); err != nil {
		t.Fatal(err)
	}
	check := tr.HealthzCheck(closed())
	for range 5 {
		clk.Step(2 * time.Second)
		if err := lock.Update(t.Context(), *record("me", clk.Now())); err != nil {
			t.Fatal(err)
		}
		expectError(t, check(httptest.NewRequest("GET", "/healthz", nil)), "")
	}
	clk.Step(16 * time.Second)
	expectError(t, check(httptest.NewRequest("GET", "/healthz", nil)), "leading without renewing the lease for 16s")
}

// TestMigrationLiveness: a running migration that stops completing
// requests fails liveness; one that ended is never stuck.
func TestMigrationLiveness(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	tr := NewTracker(clk, false)
	obs := tr.MigrationObserver(5 * time.Minute)
	widgets := schema.GroupResource{Group: "example.com", Resource: "widgets"}
	live := func() error { return Live(tr.State(true, true)) }

	obs.RunStarted(widgets)
	for range 10 {
		clk.Step(time.Minute)
		obs.Requested(widgets, "patch", nil)
		expectError(t, live(), "")
	}
	clk.Step(6 * time.Minute)
	expectError(t, live(), "migration of widgets.example.com stuck: no progress for 6m0s (limit 5m0s)")
	obs.RunEnded(widgets, context.Canceled)
	expectError(t, live(), "")
}

// TestTriggerLoop: the trigger's loop beats after every round.
func TestTriggerLoop(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	tr := NewTracker(clk, false)
	tr.Start("trigger", StallAfter(time.Minute))
	clk.Step(4 * time.Minute)
	tr.Beat("trigger")
	clk.Step(4 * time.Minute)
	expectError(t, Live(tr.State(true, true)), "")
	clk.Step(2 * time.Minute)
	expectError(t, Live(tr.State(true, true)), "trigger stuck: no progress for 6m0s")
	tr.Stop("trigger")
	expectError(t, Live(tr.State(true, true)), "")
}

func TestReadyzCheck(t *testing.T) {
	tr := NewTracker(clocktesting.NewFakeClock(t0), false)
	req := httptest.NewRequest("GET", "/readyz", nil)
	expectError(t, tr.ReadyzCheck(func(context.Context) bool { return false }, nil)(req), "caches not synced")
	expectError(t, tr.ReadyzCheck(func(context.Context) bool { return true }, nil)(req), "")
}

func TestNilTrackerTracksNothing(t *testing.T) {
	var tr *Tracker
	tr.Start("trigger", time.Minute)
	tr.Beat("trigger")
	tr.Stop("trigger")
}

func closed() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}
