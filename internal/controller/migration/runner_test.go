package migration

import (
	"context"
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
)

// TestARunEndsIntoTheSchedulerOnly: a run's outcome reaches the scheduler
// only as the ending the runner hands back, read with the runs under way:
// once a run no longer counts as running, its ending is there to settle,
// so it is never started again before its backoff.
func TestARunEndsIntoTheSchedulerOnly(t *testing.T) {
	r := &Reconciler{Recorder: events.NewFakeRecorder(10), Clock: clocktesting.NewFakeClock(t0)}
	r.setDefaults()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = r.runner.Start(ctx) }()

	retried := &migrationv1alpha1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: "widgets", UID: "u1"}}
	done := &migrationv1alpha1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: "gadgets", UID: "u2"}}
	release := make(chan struct{})
	r.runner.start(retried.Name, func(context.Context) ending {
		<-release
		return ending{m: retried, retry: errors.New("the API server is busy")}
	})
	r.runner.start(done.Name, func(context.Context) ending { return ending{m: done, final: true} })

	running, ends := r.runner.state()
	for name := range running {
		// What runs is not ended, and what is not running has ended.
		for _, e := range ends {
			if e.m.Name == name {
				t.Errorf("%s is both running and ended", name)
			}
		}
	}
	// The run that ends at once may have ended already: its ending is
	// handed back once, here.
	seen := map[string]bool{}
	for _, e := range ends {
		seen[e.m.Name] = true
	}
	r.settle(t.Context(), ends)
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for len(seen) < 2 && time.Now().Before(deadline) {
		running, ends = r.runner.state()
		for _, e := range ends {
			seen[e.m.Name] = true
		}
		r.settle(t.Context(), ends)
		for name := range running {
			if seen[name] {
				t.Errorf("%s ended, yet counts as running", name)
			}
		}
		select {
		case <-r.runner.done:
		case <-time.After(100 * time.Millisecond):
		}
	}
	if !seen[retried.Name] || !seen[done.Name] {
		t.Fatalf("endings seen: %v, want both runs'", seen)
	}
	// The cache may still list the migration that ended as unfinished.
	notBefore, ended := r.runState([]migrationv1alpha1.StorageVersionMigration{*done})
	if want := t0.Add(10 * time.Second); !notBefore[retried.Name].Equal(want) {
		t.Errorf("%s may run again at %v, want after the first backoff, %v", retried.Name, notBefore[retried.Name], want)
	}
	if _, waits := notBefore[done.Name]; waits {
		t.Errorf("%s ended for good, yet waits for a backoff", done.Name)
	}
	if !ended[done.UID] || ended[retried.UID] {
		t.Errorf("ended = %v, want %s alone remembered as ended until the cache shows it", ended, done.Name)
	}
	if _, ends := r.runner.state(); len(ends) != 0 {
		t.Errorf("endings handed back twice: %+v", ends)
	}
}
