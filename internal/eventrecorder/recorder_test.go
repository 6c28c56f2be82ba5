package eventrecorder

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
)

// drops counts the dropped callback's calls by reason.
type drops struct {
	mu sync.Mutex
	n  map[string]int
}

func (d *drops) add(reason string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n == nil {
		d.n = map[string]int{}
	}
	d.n[reason]++
}

func (d *drops) count(reason string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[reason]
}

func newSender(t *testing.T, capacity int) (*Sender, *fake.Clientset, *drops) {
	t.Helper()
	cs := fake.NewClientset()
	d := &drops{}
	sch := runtime.NewScheme()
	if err := migrationv1alpha1.AddToScheme(sch); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(sch); err != nil {
		t.Fatal(err)
	}
	s := New(cs.EventsV1(), sch, capacity, d.add)
	s.retry = wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 3}
	return s, cs, d
}

func migration() *migrationv1alpha1.StorageVersionMigration {
	return &migrationv1alpha1.StorageVersionMigration{
		TypeMeta:   metav1.TypeMeta{APIVersion: migrationv1alpha1.GroupVersion.String(), Kind: "StorageVersionMigration"},
		ObjectMeta: metav1.ObjectMeta{Name: "widgets-abc", UID: "u1", ResourceVersion: "7"},
	}
}

// sendAll runs the Sender until everything queued is sent.
func sendAll(t *testing.T, s *Sender) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
}

func created(t *testing.T, cs *fake.Clientset) []eventsv1.Event {
	t.Helper()
	list, err := cs.EventsV1().Events(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

func TestEventSentAsClientGoMakesIt(t *testing.T) {
	s, cs, d := newSender(t, 10)
	crd := &corev1.Namespace{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}, ObjectMeta: metav1.ObjectMeta{Name: "related"}}
	long := strings.Repeat("é", 600) // 1,200 bytes: cut at 1,024 without splitting a character
	s.Recorder("svm-trigger").Eventf(migration(), crd, corev1.EventTypeWarning, "PruneHeld", "HoldPrune", "held: %s", long)
	sendAll(t, s)

	evs := created(t, cs)
	if len(evs) != 1 {
		t.Fatalf("%d events created, want 1", len(evs))
	}
	ev := evs[0]
	if ev.Namespace != metav1.NamespaceDefault || !strings.HasPrefix(ev.Name, "widgets-abc.") {
		t.Errorf("event %s/%s, want default/widgets-abc.<time> for a cluster-scoped object", ev.Namespace, ev.Name)
	}
	if ev.ReportingController != "svm-trigger" || ev.ReportingInstance != "svm-trigger-"+s.host {
		t.Errorf("reported by %q, instance %q", ev.ReportingController, ev.ReportingInstance)
	}
	if ev.Type != corev1.EventTypeWarning || ev.Reason != "PruneHeld" || ev.Action != "HoldPrune" || ev.EventTime.IsZero() {
		t.Errorf("type %q reason %q action %q time %v", ev.Type, ev.Reason, ev.Action, ev.EventTime)
	}
	if ev.Regarding.Kind != "StorageVersionMigration" || ev.Regarding.Name != "widgets-abc" || ev.Regarding.UID != "u1" {
		t.Errorf("regarding %+v", ev.Regarding)
	}
	if ev.Related == nil || ev.Related.Kind != "Namespace" || ev.Related.Name != "related" {
		t.Errorf("related %+v", ev.Related)
	}
	if len(ev.Note) > maxNote || len(ev.Note) < maxNote-1 || !strings.HasPrefix(ev.Note, "held: é") || strings.ContainsRune(ev.Note, '\uFFFD') {
		t.Errorf("note of %d bytes, want at most %d whole characters", len(ev.Note), maxNote)
	}
	if len(d.n) != 0 {
		t.Errorf("dropped %v, want none", d.n)
	}
}

func TestFullQueueDropsWithoutBlocking(t *testing.T) {
	s, cs, d := newSender(t, 2)
	rec := s.Recorder("svm-controller")
	done := make(chan struct{})
	go func() {
		for range 5 {
			rec.Eventf(migration(), nil, corev1.EventTypeNormal, "Migrating", "Migrate", "Migrating widgets")
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Eventf blocked on a full queue")
	}
	if got := d.count(DroppedQueueFull); got != 3 {
		t.Errorf("%d dropped as queue_full, want 3", got)
	}
	sendAll(t, s)
	if got := len(created(t, cs)); got != 2 {
		t.Errorf("%d events created, want the 2 queued", got)
	}
}

func TestInvalidEventIsDropped(t *testing.T) {
	s, cs, d := newSender(t, 2)
	s.Recorder("svm-controller").Eventf(migration(), nil, "Loud", "Migrating", "Migrate", "x")
	// A type the scheme does not know has no reference.
	s.Recorder("svm-controller").Eventf(&runtime.Unknown{}, nil, corev1.EventTypeNormal, "Migrating", "Migrate", "x")
	sendAll(t, s)
	if got := d.count(DroppedInvalid); got != 2 {
		t.Errorf("%d dropped as invalid, want 2", got)
	}
	if got := len(created(t, cs)); got != 0 {
		t.Errorf("%d events created, want none", got)
	}
}

// refuse makes the fake API server answer the first n creates of Events
// with err, and counts the creates.
func refuse(cs *fake.Clientset, n int, err error) *int {
	calls := 0
	cs.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
		calls++
		if calls <= n {
			return true, nil, err
		}
		return false, nil, nil
	})
	return &calls
}

func TestSendRetriesOnlyWhatMaySucceed(t *testing.T) {
	gr := schema.GroupResource{Group: "events.k8s.io", Resource: "events"}
	for _, tc := range []struct {
		name             string
		refusals         int
		err              error
		wantCalls        int
		wantCreated      int
		wantDroppedCount int
	}{
		{"throttled twice, then created", 2, apierrors.NewTooManyRequests("slow down", 1), 3, 1, 0},
		{"unavailable at every attempt", 100, apierrors.NewServiceUnavailable("down"), 3, 0, 1},
		{"invalid: one attempt", 100, apierrors.NewInvalid(schema.GroupKind{Group: "events.k8s.io", Kind: "Event"}, "x", nil), 1, 0, 1},
		{"forbidden: one attempt", 100, apierrors.NewForbidden(gr, "x", nil), 1, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, cs, d := newSender(t, 2)
			calls := refuse(cs, tc.refusals, tc.err)
			s.Recorder("svm-controller").Eventf(migration(), nil, corev1.EventTypeNormal, "Migrating", "Migrate", "x")
			sendAll(t, s)
			if *calls != tc.wantCalls {
				t.Errorf("%d creates, want %d", *calls, tc.wantCalls)
			}
			if got := len(created(t, cs)); got != tc.wantCreated {
				t.Errorf("%d events created, want %d", got, tc.wantCreated)
			}
			if got := d.count(DroppedRefused); got != tc.wantDroppedCount {
				t.Errorf("%d dropped as refused, want %d", got, tc.wantDroppedCount)
			}
		})
	}
}

func TestStartSendsUntilStopped(t *testing.T) {
	s, cs, _ := newSender(t, 10)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- s.Start(ctx) }()
	s.Recorder("svm-controller").Eventf(migration(), nil, corev1.EventTypeNormal, "Migrating", "Migrate", "x")
	deadline := time.Now().Add(10 * time.Second)
	for len(created(t, cs)) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := len(created(t, cs)); got != 1 {
		t.Fatalf("%d events created while running, want 1", got)
	}
	cancel()
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}
