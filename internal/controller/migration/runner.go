package migration

import (
	"context"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
)

// runner owns the goroutines of running migrations. As a manager Runnable
// it starts with leadership and, on shutdown, cancels every migration and
// waits for each to stop, so SIGTERM drains cleanly: every migration has
// saved its last completed chunk before the process exits.
type runner struct {
	mu      sync.Mutex
	ctx     context.Context
	cancels map[string]context.CancelCauseFunc
	wg      sync.WaitGroup
	done    chan string
	ready   chan struct{}
	once    sync.Once
	// ended holds how each run ended, until the scheduler takes it.
	ended []ending
}

// Start implements manager.Runnable.
func (r *runner) Start(ctx context.Context) error {
	r.mu.Lock()
	r.ctx = ctx
	r.cancels = map[string]context.CancelCauseFunc{}
	r.mu.Unlock()
	r.readyCh()
	close(r.ready)
	<-ctx.Done()
	r.wg.Wait()
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (r *runner) NeedLeaderElection() bool { return true }

func (r *runner) readyCh() chan struct{} {
	r.once.Do(func() { r.ready = make(chan struct{}) })
	return r.ready
}

// start runs fn in a goroutine of its own under name, unless one runs
// already; how it ended is kept for the scheduler (state), then the
// scheduler is woken (events).
func (r *runner) start(name string, fn func(context.Context) ending) {
	<-r.readyCh()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx.Err() != nil || r.cancels[name] != nil {
		return
	}
	ctx, cancel := context.WithCancelCause(r.ctx)
	r.cancels[name] = cancel
	r.wg.Go(func() {
		var end ending
		defer func() {
			r.mu.Lock()
			delete(r.cancels, name)
			r.ended = append(r.ended, end)
			r.mu.Unlock()
			cancel(nil)
			select {
			case r.done <- name:
			case <-r.ctx.Done():
			}
		}()
		end = fn(ctx)
	})
}

// state returns the names of the runs under way and how the runs that
// ended since the last call ended, forgetting those, read together: a run
// missing from the first is in the second, so the scheduler never sees a
// run gone without its ending (and starts it again before its backoff).
func (r *runner) state() (running map[string]bool, ended []ending) {
	r.mu.Lock()
	defer r.mu.Unlock()
	running = make(map[string]bool, len(r.cancels))
	for name := range r.cancels {
		running[name] = true
	}
	ended, r.ended = r.ended, nil
	return running, ended
}

// shuttingDown reports whether the runner is draining, as opposed to
// stopping single migrations.
func (r *runner) shuttingDown() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ctx == nil || r.ctx.Err() != nil
}

// stop cancels a running migration with cause, which the run reads with
// context.Cause to tell why it was stopped.
func (r *runner) stop(name string, cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cancel := r.cancels[name]; cancel != nil {
		cancel(cause)
	}
}

// events turns "a migration goroutine ended" into an event, so the next
// migration starts without waiting for an unrelated one.
func (r *runner) events() <-chan event.GenericEvent {
	out := make(chan event.GenericEvent)
	go func() {
		for name := range r.done {
			out <- event.GenericEvent{Object: &migrationv1alpha1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: name}}}
		}
	}()
	return out
}
