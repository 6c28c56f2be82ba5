// Package round gives the controllers that look at the whole cluster at
// once (the trigger, the re-encryption controller) the shape of every
// other controller-runtime controller. Their Reconcile takes one
// well-known request, a round: it runs once when the controller starts
// (with leadership), again after the events of its watches, and again
// after the RequeueAfter it returns. The workqueue then does what such
// controllers would otherwise hand-make with kick channels and timers: it
// runs one round at a time, folds the events that arrive during a round
// into the next one, and of several times asked for keeps the earliest.
// Each round decides from svm's own objects read afresh (ReadObjects).
package round

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/svm-project/svm/internal/health"
)

// Request is the one request a round controller reconciles.
var Request = reconcile.Request{NamespacedName: types.NamespacedName{Name: "round"}}

// Queue is the workqueue of a round controller.
type Queue = workqueue.TypedRateLimitingInterface[reconcile.Request]

// NewControllerManagedBy starts the builder of a round controller named
// name: one round at a time, the first as soon as the controller starts.
// The caller adds its watches (with After as their handler) and completes
// it with its reconciler. With a tracker, the rounds are held to come at
// least every interval while this replica leads (Liveness); the
// reconciler beats tracker after every round.
func NewControllerManagedBy(mgr ctrl.Manager, name string, tracker *health.Tracker, interval time.Duration) (*builder.Builder, error) {
	if tracker != nil {
		if err := mgr.Add(Liveness(tracker, name, interval)); err != nil {
			return nil, err
		}
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(name).
		WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
		WatchesRawSource(source.Func(func(_ context.Context, q Queue) error {
			q.Add(Request)
			return nil
		})), nil
}

// After is the event handler of a round controller's watches: every event
// asks for a round delay later, so that a burst of events (a migration
// changes after every chunk) makes one round, not one each.
func After(delay time.Duration) handler.EventHandler {
	add := func(q Queue) { q.AddAfter(Request, delay) }
	return handler.Funcs{
		CreateFunc:  func(_ context.Context, _ event.CreateEvent, q Queue) { add(q) },
		UpdateFunc:  func(_ context.Context, _ event.UpdateEvent, q Queue) { add(q) },
		DeleteFunc:  func(_ context.Context, _ event.DeleteEvent, q Queue) { add(q) },
		GenericFunc: func(_ context.Context, _ event.GenericEvent, q Queue) { add(q) },
	}
}

// Kicks is a source of rounds for events from outside the manager's cache
// (an informer of an API that may not be served, say): Kick asks for a
// round. Kicks before the controller starts are not needed, since it
// starts with a round, and are dropped.
type Kicks struct {
	mu sync.Mutex
	q  Queue
}

var _ source.Source = (*Kicks)(nil)

// Start implements source.Source.
func (k *Kicks) Start(_ context.Context, q Queue) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.q = q
	return nil
}

// Kick asks for a round delay from now.
func (k *Kicks) Kick(delay time.Duration) {
	k.mu.Lock()
	q := k.q
	k.mu.Unlock()
	if q != nil {
		q.AddAfter(Request, delay)
	}
}

// String implements fmt.Stringer for the controller's logs.
func (k *Kicks) String() string { return "round kicks" }

// Only keeps the update events whose old and new object keep accepts
// (builder.WithPredicates(round.Only(...))); creations and deletions are
// dropped.
func Only(keep func(old, new client.Object) bool) builder.Predicates {
	return builder.WithPredicates(predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(e event.UpdateEvent) bool { return keep(e.ObjectOld, e.ObjectNew) },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	})
}

// Liveness is what a round controller adds to its manager so that a leader
// whose rounds stop fails the liveness probe: while this replica leads, it
// tells tracker that the rounds of loop must keep coming, one at least
// every interval (health.StallAfter gives the slack); the controller's
// Reconcile beats tracker after every round. A replica that does not lead
// runs no rounds, and is not stuck for that.
func Liveness(tracker *health.Tracker, loop string, interval time.Duration) manager.Runnable {
	return liveness{tracker: tracker, loop: loop, interval: interval}
}

type liveness struct {
	tracker  *health.Tracker
	loop     string
	interval time.Duration
}

// Start implements manager.Runnable.
func (l liveness) Start(ctx context.Context) error {
	l.tracker.Start(l.loop, health.StallAfter(l.interval))
	<-ctx.Done()
	l.tracker.Stop(l.loop)
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: the rounds
// run with leadership only.
func (liveness) NeedLeaderElection() bool { return true }

// Spacing keeps rounds apart: the next round starts no sooner than
// SpacingFactor times what the last one cost after it, so that what every
// round pays (reading the cluster, deciding each resource) takes at most
// 1/(1+SpacingFactor) of the time, however many resources a round reads
// and however often changes ask for one. A round
// reads the whole cluster and decides every resource: a change that
// arrives while the next one waits is decided then, and none is lost,
// only gathered with the others (a bulk flip of a thousand CRDs makes a
// change a second, each asking for a round). Rounds that take a few
// milliseconds, on small clusters, are not held back at all in practice.
type Spacing struct {
	// notBefore is when the next round may start.
	notBefore time.Time
}

// SpacingFactor is how many times its own length a round waits before the
// next: 2, at most a third of the time spent in rounds.
const SpacingFactor = 2

// Wait returns how long the round asked for at now must wait; 0: it may
// run.
func (s *Spacing) Wait(now time.Time) time.Duration {
	return max(0, s.notBefore.Sub(now))
}

// Ended records a round whose cost ran from start to end: what its caller
// counts as the cost, which may leave out waits that are not the round's
// own.
func (s *Spacing) Ended(start, end time.Time) {
	s.notBefore = end.Add(SpacingFactor * end.Sub(start))
}
