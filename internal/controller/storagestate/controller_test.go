package storagestate

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	fakediscovery "k8s.io/client-go/discovery/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/controller/round"
	"github.com/svm-project/svm/internal/health"
	"github.com/svm-project/svm/internal/scheme"
	"github.com/svm-project/svm/internal/trigger"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 0, 0, time.UTC)

const (
	interval = 10 * time.Minute
	unknown  = migrationv1alpha1.UnknownStorageVersionHash
)

// preferredDiscovery answers ServerPreferredResources from the fake's
// Resources, as a server would; the fake itself answers nothing.
type preferredDiscovery struct{ *fakediscovery.FakeDiscovery }

func (d preferredDiscovery) ServerPreferredResources() ([]*metav1.APIResourceList, error) {
	return discovery.ServerPreferredResources(d.FakeDiscovery)
}

// cluster is a triggering controller over a fake client, fake discovery
// and a fake clock.
type cluster struct {
	t      *testing.T
	c      *Controller
	clock  *clocktesting.FakeClock
	client client.Client
	disc   *fakediscovery.FakeDiscovery
}

func newCluster(t *testing.T, objs ...client.Object) *cluster {
	t.Helper()
	cl := fake.NewClientBuilder().WithScheme(scheme.Scheme).
		WithStatusSubresource(&migrationv1alpha1.StorageState{}, &migrationv1alpha1.StorageVersionMigration{}).
		WithObjects(objs...).Build()
	disc := &fakediscovery.FakeDiscovery{Fake: &k8stesting.Fake{}}
	clk := clocktesting.NewFakeClock(t0)
	c := &Controller{Client: cl, Reader: cl, Discovery: preferredDiscovery{disc}, Clock: clk, Interval: interval}
	c.setDefaults()
	return &cluster{t: t, c: c, clock: clk, client: cl, disc: disc}
}

// serve makes discovery report configmaps and widgets.example.com with
// these storage version hashes.
func (k *cluster) serve(configmaps, widgets string) {
	verbs := metav1.Verbs{"list", "patch"}
	k.disc.Resources = []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: verbs, StorageVersionHash: configmaps},
		}},
		{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{
			{Name: "widgets", Kind: "Widget", Namespaced: true, Verbs: verbs, StorageVersionHash: widgets},
		}},
	}
}

func (k *cluster) reconcile() reconcile.Result {
	k.t.Helper()
	res, err := k.c.Reconcile(k.t.Context(), round.Request)
	if err != nil {
		k.t.Fatalf("Reconcile: %v", err)
	}
	return res
}

func (k *cluster) state(name string) *migrationv1alpha1.StorageState {
	k.t.Helper()
	var s migrationv1alpha1.StorageState
	if err := k.client.Get(k.t.Context(), client.ObjectKey{Name: name}, &s); err != nil {
		k.t.Fatalf("get storage state %s: %v", name, err)
	}
	return &s
}

// migrations lists the migrations of resource (as "resource.group")
// that the trigger made, by target hash.
func (k *cluster) migrations(resource string) map[string][]migrationv1alpha1.StorageVersionMigration {
	k.t.Helper()
	var list migrationv1alpha1.StorageVersionMigrationList
	if err := k.client.List(k.t.Context(), &list); err != nil {
		k.t.Fatal(err)
	}
	out := map[string][]migrationv1alpha1.StorageVersionMigration{}
	for _, m := range list.Items {
		r := migrationv1alpha1.GroupResource{Group: m.Spec.Resource.Group, Resource: m.Spec.Resource.Resource}
		if migrationv1alpha1.StorageStateName(r) == resource && trigger.IsOwned(&m) {
			out[trigger.TargetHash(&m)] = append(out[trigger.TargetHash(&m)], m)
		}
	}
	return out
}

func expectRequeue(t *testing.T, got reconcile.Result, want time.Duration) {
	t.Helper()
	if got.RequeueAfter != want {
		t.Errorf("RequeueAfter = %s, want %s", got.RequeueAfter, want)
	}
}

func expectStatus(t *testing.T, s *migrationv1alpha1.StorageState, current string, persisted ...string) {
	t.Helper()
	if s.Status.CurrentStorageVersionHash != current || !slices.Equal(s.Status.PersistedStorageVersionHashes, persisted) {
		t.Errorf("storage state %s: current %q, persisted %q; want %q, %q", s.Name,
			s.Status.CurrentStorageVersionHash, s.Status.PersistedStorageVersionHashes, current, persisted)
	}
}

// TestFirstRoundCreatesStates: the first round discovers, creates a
// StorageState per resource and a first-sight migration of each, and
// comes back for the next discovery an Interval later.
func TestFirstRoundCreatesStates(t *testing.T) {
	k := newCluster(t)
	k.serve("cm1", "w1")
	expectRequeue(t, k.reconcile(), interval)

	expectStatus(t, k.state("configmaps"), "cm1", unknown)
	expectStatus(t, k.state("widgets.example.com"), "w1", unknown)
	for resource, hash := range map[string]string{"configmaps": "cm1", "widgets.example.com": "w1"} {
		got := k.migrations(resource)
		if len(got) != 1 || len(got[hash]) != 1 {
			t.Errorf("migrations of %s by target hash: %v, want one to %s", resource, got, hash)
		}
	}
}

// TestDiscoveryEveryInterval: a changed storage version hash is seen at
// the next discovery, an Interval after the last; a round in between
// (after a migration changed, say) does not discover.
func TestDiscoveryEveryInterval(t *testing.T) {
	k := newCluster(t)
	k.serve("cm1", "w1")
	k.reconcile()
	k.serve("cm1", "w2")

	k.clock.Step(interval / 2)
	expectRequeue(t, k.reconcile(), interval/2)
	expectStatus(t, k.state("widgets.example.com"), "w1", unknown)
	if got := k.migrations("widgets.example.com"); len(got["w2"]) != 0 {
		t.Errorf("a round between discoveries made a migration to w2: %v", got)
	}

	k.clock.Step(interval / 2)
	expectRequeue(t, k.reconcile(), interval)
	expectStatus(t, k.state("widgets.example.com"), "w2", unknown, "w2")
	got := k.migrations("widgets.example.com")
	if len(got["w2"]) != 1 || len(got["w1"]) != 0 {
		t.Errorf("migrations of widgets by target hash after the change: %v, want the one to w1 stopped and one to w2", got)
	}
	if got := k.migrations("configmaps"); len(got) != 1 || len(got["cm1"]) != 1 {
		t.Errorf("migrations of configmaps by target hash: %v, want the first one alone", got)
	}
}

// TestHeartbeatsComeWithThePeriodicRounds: a discovery that a change
// asks for between the periodic ones writes no StorageState whose storage
// it finds unchanged, and keeps the periodic rounds' pace; the periodic
// round, an Interval after the first, renews every heartbeat.
func TestHeartbeatsComeWithThePeriodicRounds(t *testing.T) {
	k := newCluster(t)
	k.serve("cm1", "w1")
	k.reconcile()
	first := k.state("configmaps").Status.LastHeartbeatTime

	k.clock.Step(interval / 2)
	k.c.rediscover.Store(true)
	expectRequeue(t, k.reconcile(), interval/2)
	if got := k.state("configmaps").Status.LastHeartbeatTime; !got.Equal(&first) {
		t.Errorf("a round a change asked for renewed the heartbeat: %v, was %v", got, first)
	}

	k.clock.Step(interval / 2)
	expectRequeue(t, k.reconcile(), interval)
	if got := k.state("configmaps").Status.LastHeartbeatTime; !got.Time.Equal(t0.Add(interval)) {
		t.Errorf("the periodic round's heartbeat: %v, want %v", got, t0.Add(interval))
	}
}

// TestRetryComesBeforeDiscovery: after a migration failed, the round
// asks to come back when its retry falls due, sooner than the next
// discovery, and then makes the new migration.
func TestRetryComesBeforeDiscovery(t *testing.T) {
	k := newCluster(t)
	k.serve("cm1", "w1")
	k.reconcile()
	first := k.migrations("widgets.example.com")["w1"]
	if len(first) != 1 {
		t.Fatalf("want one migration of widgets, got %d", len(first))
	}
	failed := first[0].DeepCopy()
	failed.Status.Conditions = []migrationv1alpha1.MigrationCondition{{
		Type: migrationv1alpha1.MigrationFailed, Status: corev1.ConditionTrue, LastUpdateTime: metav1.NewTime(t0), Reason: "Test",
	}}
	failed.Status.CompletionTime = &metav1.Time{Time: t0}
	if err := k.client.Status().Update(t.Context(), failed); err != nil {
		t.Fatal(err)
	}

	// The watch of the failed migration asks for a round.
	k.clock.Step(10 * time.Second)
	expectRequeue(t, k.reconcile(), k.c.RetryBase-10*time.Second)
	if got := len(k.migrations("widgets.example.com")["w1"]); got != 1 {
		t.Errorf("%d migrations of widgets before the retry is due, want the failed one alone", got)
	}

	k.clock.Step(k.c.RetryBase - 10*time.Second)
	expectRequeue(t, k.reconcile(), interval-k.c.RetryBase)
	if got := len(k.migrations("widgets.example.com")["w1"]); got != 2 {
		t.Errorf("%d migrations of widgets once the retry is due, want the failed one and a new one", got)
	}
}

// TestFirstRoundResetsStaleStates: a StorageState whose heartbeat is
// older than StaleAfter is reset to Unknown on the first round, and its
// resource migrated again; a fresh one is left as it is.
func TestFirstRoundResetsStaleStates(t *testing.T) {
	stateOf := func(r migrationv1alpha1.GroupResource, hash string, heartbeat time.Time) *migrationv1alpha1.StorageState {
		return &migrationv1alpha1.StorageState{
			ObjectMeta: metav1.ObjectMeta{Name: migrationv1alpha1.StorageStateName(r)},
			Spec:       migrationv1alpha1.StorageStateSpec{Resource: r},
			Status: migrationv1alpha1.StorageStateStatus{
				CurrentStorageVersionHash: hash, PersistedStorageVersionHashes: []string{hash},
				LastHeartbeatTime: metav1.NewTime(heartbeat),
			},
		}
	}
	k := newCluster(t,
		stateOf(migrationv1alpha1.GroupResource{Group: "example.com", Resource: "widgets"}, "w1", t0.Add(-20*time.Minute)),
		stateOf(migrationv1alpha1.GroupResource{Resource: "configmaps"}, "cm1", t0.Add(-time.Minute)),
	)
	k.serve("cm1", "w1")
	expectRequeue(t, k.reconcile(), interval)

	widgets := k.state("widgets.example.com")
	expectStatus(t, widgets, "w1", unknown)
	if !widgets.Status.LastHeartbeatTime.Time.Equal(t0) {
		t.Errorf("heartbeat of the reset state: %s, want %s", widgets.Status.LastHeartbeatTime, t0)
	}
	if got := k.migrations("widgets.example.com"); len(got["w1"]) != 1 {
		t.Errorf("migrations of widgets after the reset: %v, want one to w1", got)
	}
	expectStatus(t, k.state("configmaps"), "cm1", "cm1")
	if got := k.migrations("configmaps"); len(got) != 0 {
		t.Errorf("migrations of configmaps, whose state is fresh: %v, want none", got)
	}

	// Later rounds do not reset again, however long they wait.
	k.clock.Step(interval)
	k.reconcile()
	k.clock.Step(interval)
	k.reconcile()
	if got := k.migrations("widgets.example.com"); len(got["w1"]) != 1 {
		t.Errorf("migrations of widgets after later rounds: %v, want still one to w1", got)
	}
	expectStatus(t, k.state("configmaps"), "cm1", "cm1")
}

// TestLiveness: while the replica leads, rounds must keep coming; once
// leadership (the manager) ends, their silence is no stall.
func TestLiveness(t *testing.T) {
	k := newCluster(t)
	k.serve("cm1", "w1")
	tracker := health.NewTracker(k.clock, false)
	k.c.Health = tracker
	live := func() error { return health.Live(tracker.State(true, true)) }
	if err := live(); err != nil {
		t.Fatalf("live before leading: %v", err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = round.Liveness(tracker, loopName, interval).Start(ctx)
	}()
	waitFor(t, func() bool { return len(tracker.State(true, true).Loops) == 1 })

	stall := health.StallAfter(interval)
	for range 5 {
		k.clock.Step(interval)
		k.reconcile()
		if err := live(); err != nil {
			t.Fatalf("live while rounds come every interval: %v", err)
		}
	}
	k.clock.Step(stall + time.Second)
	if err := live(); err == nil {
		t.Fatalf("live after no round for %s, want stuck", stall+time.Second)
	}
	cancel()
	<-stopped
	if err := live(); err != nil {
		t.Errorf("live once the manager stopped: %v", err)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}
