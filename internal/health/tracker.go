package health

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"github.com/svm-project/svm/internal/migrator"
)

// Tracker gathers the State the probes decide from. It is safe for
// concurrent use; a nil *Tracker tracks nothing, so controllers built
// without one (in tests) need no checks.
type Tracker struct {
	clock          clock.PassiveClock
	leaderElection bool

	mu      sync.Mutex
	lease   Leadership
	lastRaw []byte
	loops   map[string]*trackedLoop
}

type trackedLoop struct {
	Loop
	running int // runs of the loop under way; one per resource for migrations
}

// NewTracker returns a Tracker that reads time from clk. leaderElection
// says whether the replica takes part in leader election; if it does, wrap
// the election's lock with WrapLock.
func NewTracker(clk clock.PassiveClock, leaderElection bool) *Tracker {
	return &Tracker{clock: clk, leaderElection: leaderElection, loops: map[string]*trackedLoop{}}
}

// Start records that the loop name runs and must beat at least every
// stallAfter.
func (t *Tracker) Start(name string, stallAfter time.Duration) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.loops[name]
	if l == nil {
		l = &trackedLoop{Loop: Loop{Name: name}}
		t.loops[name] = l
	}
	l.running++
	l.StallAfter = stallAfter
	l.LastBeat = t.clock.Now()
}

// Beat records that the loop name made progress.
func (t *Tracker) Beat(name string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.loops[name]; l != nil {
		l.LastBeat = t.clock.Now()
	}
}

// Stop records that a run of the loop name ended: an idle loop is never
// stuck.
func (t *Tracker) Stop(name string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.loops[name]; l != nil {
		if l.running--; l.running <= 0 {
			delete(t.loops, name)
		}
	}
}

// State is a snapshot for the probes.
func (t *Tracker) State(cachesSynced, leading bool) State {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := State{Now: t.clock.Now(), CachesSynced: cachesSynced, Leadership: t.lease}
	s.Leadership.Enabled = t.leaderElection
	s.Leadership.Leading = leading
	for _, l := range t.loops {
		s.Loops = append(s.Loops, l.Loop)
	}
	slices.SortFunc(s.Loops, func(a, b Loop) int { return strings.Compare(a.Name, b.Name) })
	return s
}

// ReadyzCheck is the readiness check: synced reports whether the caches
// have synced by the time its context ends; elected is closed once this
// replica leads.
func (t *Tracker) ReadyzCheck(synced func(context.Context) bool, elected <-chan struct{}) healthz.Checker {
	return func(req *http.Request) error {
		// A synced cache answers at once; give an unsynced one a moment,
		// well within a kubelet probe's timeout.
		ctx, cancel := context.WithTimeout(req.Context(), 200*time.Millisecond)
		defer cancel()
		return Ready(t.State(synced(ctx), isClosed(elected)))
	}
}

// HealthzCheck is the liveness check; elected is closed once this replica
// leads. A failure is logged with its reason: the kubelet is about to
// restart the replica, and the probe's answer withholds why.
func (t *Tracker) HealthzCheck(elected <-chan struct{}) healthz.Checker {
	return func(*http.Request) error {
		err := Live(t.State(true, isClosed(elected)))
		if err != nil {
			klog.Background().Info("Liveness check failed", "reason", err.Error())
		}
		return err
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// WrapLock returns lock, telling t what the leader elector reads and
// writes: that is how a follower knows a valid lease is held, and how a
// leader's renewals are seen, at no cost of extra requests.
func (t *Tracker) WrapLock(lock resourcelock.Interface) resourcelock.Interface {
	t.mu.Lock()
	t.lease.Identity = lock.Identity()
	t.mu.Unlock()
	return &observedLock{Interface: lock, t: t}
}

type observedLock struct {
	resourcelock.Interface
	t *Tracker
}

func (l *observedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	rec, raw, err := l.Interface.Get(ctx)
	if err == nil {
		l.t.read(rec, raw)
	}
	return rec, raw, err
}

func (l *observedLock) Create(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Create(ctx, rec)
	if err == nil {
		l.t.wrote(rec)
	}
	return err
}

func (l *observedLock) Update(ctx context.Context, rec resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Update(ctx, rec)
	if err == nil {
		l.t.wrote(rec)
	}
	return err
}

// read records a lease as read. As in client-go's elector, only a change of
// the record restarts its lease duration: a holder that stopped renewing
// leaves the same bytes behind.
func (t *Tracker) read(rec *resourcelock.LeaderElectionRecord, raw []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !bytes.Equal(raw, t.lastRaw) {
		t.lastRaw = bytes.Clone(raw)
		t.lease.Observed = t.clock.Now()
	}
	t.lease.Holder = rec.HolderIdentity
	t.lease.LeaseDuration = time.Duration(rec.LeaseDurationSeconds) * time.Second
}

func (t *Tracker) wrote(rec resourcelock.LeaderElectionRecord) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	t.lastRaw = nil
	t.lease.Observed = now
	t.lease.Holder = rec.HolderIdentity
	t.lease.LeaseDuration = time.Duration(rec.LeaseDurationSeconds) * time.Second
	if rec.HolderIdentity == t.lease.Identity {
		t.lease.Renewed = now
	}
}

// MigrationObserver returns an engine observer that tracks every running
// migration as a loop named after its resource, which must complete a
// request (or skip an object) at least every stallAfter.
func (t *Tracker) MigrationObserver(stallAfter time.Duration) migrator.Observer {
	return &migrationObserver{t: t, stallAfter: stallAfter}
}

type migrationObserver struct {
	migrator.NopObserver
	t          *Tracker
	stallAfter time.Duration
}

func migrationLoop(r schema.GroupResource) string { return "migration of " + r.String() }

func (o *migrationObserver) RunStarted(r schema.GroupResource) {
	o.t.Start(migrationLoop(r), o.stallAfter)
}

func (o *migrationObserver) RunEnded(r schema.GroupResource, _ error) { o.t.Stop(migrationLoop(r)) }

func (o *migrationObserver) Requested(r schema.GroupResource, _ string, _ error) {
	o.t.Beat(migrationLoop(r))
}

func (o *migrationObserver) ObjectSkipped(r schema.GroupResource, _ migrator.SkipReason, _ error) {
	o.t.Beat(migrationLoop(r))
}

// LimiterWaited counts as progress: at a low --qps a request may wait
// long, and waiting its turn is not being stuck.
func (o *migrationObserver) LimiterWaited(r schema.GroupResource, _ time.Duration) {
	o.t.Beat(migrationLoop(r))
}
