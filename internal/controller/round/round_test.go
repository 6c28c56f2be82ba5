package round

import (
	"context"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/svm-project/svm/internal/health"
)

func newQueue(clk *clocktesting.FakeClock) Queue {
	return workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request](),
		workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{Clock: clk})
}

// waitLen waits until q holds n requests: the delaying queue moves an item
// in on its own goroutine once the fake clock passes its time.
func waitLen(t *testing.T, q Queue, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for q.Len() != n {
		if time.Now().After(deadline) {
			t.Fatalf("queue holds %d requests, want %d", q.Len(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestAfterFoldsABurstIntoOneRound(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	q := newQueue(clk)
	defer q.ShutDown()
	h := After(time.Second)
	// Ten events 100ms apart: the last comes at 0.9s, before the first
	// one's delay runs out. (Stepping after the last too would reach the
	// delay exactly, and the queue's timer may fire before the check.)
	for i := range 10 {
		if i > 0 {
			clk.Step(100 * time.Millisecond)
		}
		h.Update(t.Context(), event.UpdateEvent{}, q)
	}
	if q.Len() != 0 {
		t.Fatalf("a round queued %d times before the delay passed, want none yet", q.Len())
	}
	// The first event's delay ran out first: one round, not ten.
	clk.Step(time.Second)
	waitLen(t, q, 1)
	if got, _ := q.Get(); got != Request {
		t.Errorf("queued %v, want the round request", got)
	}
}

func TestKicksQueueRoundsOnceStarted(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	q := newQueue(clk)
	defer q.ShutDown()
	var k Kicks
	k.Kick(0) // before the controller starts: it starts with a round anyway
	if err := k.Start(t.Context(), q); err != nil {
		t.Fatal(err)
	}
	if q.Len() != 0 {
		t.Fatalf("a kick before the start queued a round")
	}
	k.Kick(0)
	waitLen(t, q, 1)
}

func TestLivenessTracksTheRoundsWhileLeading(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	tracker := health.NewTracker(clk, true)
	live := func() error { return health.Live(tracker.State(true, false)) }
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = Liveness(tracker, "rounds", time.Minute).Start(ctx)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for len(tracker.State(true, false).Loops) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the rounds are not tracked once leading")
		}
		time.Sleep(time.Millisecond)
	}
	stall := health.StallAfter(time.Minute)
	clk.Step(stall / 2)
	tracker.Beat("rounds")
	clk.Step(stall / 2)
	if err := live(); err != nil {
		t.Errorf("live with a round every half stall: %v", err)
	}
	clk.Step(stall)
	if err := live(); err == nil {
		t.Errorf("live with no round for %s, want stuck", stall)
	}
	cancel()
	<-stopped
	if err := live(); err != nil {
		t.Errorf("live once leadership ended: %v", err)
	}
	if Liveness(tracker, "rounds", time.Minute).(interface{ NeedLeaderElection() bool }).NeedLeaderElection() != true {
		t.Error("liveness runs without leadership, where no rounds run")
	}
}

// TestSpacingHoldsTheNextRoundTwiceTheLastOnesLength: after a round of 3 s
// the next waits 6 s from its end; one asked for later waits what is left,
// and one asked for after that runs at once. Before any round, none waits.
func TestSpacingHoldsTheNextRoundTwiceTheLastOnesLength(t *testing.T) {
	var s Spacing
	start := time.Unix(1000, 0)
	if w := s.Wait(start); w != 0 {
		t.Fatalf("before any round: wait %v, want 0", w)
	}
	end := start.Add(3 * time.Second)
	s.Ended(start, end)
	for _, c := range []struct {
		after, want time.Duration
	}{
		{0, 6 * time.Second},
		{time.Second, 5 * time.Second},
		{6 * time.Second, 0},
		{time.Minute, 0},
	} {
		if w := s.Wait(end.Add(c.after)); w != c.want {
			t.Errorf("%v after a round of 3s: wait %v, want %v", c.after, w, c.want)
		}
	}
}
