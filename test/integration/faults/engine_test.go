package faults_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/svm-project/svm/internal/migrator"
	"github.com/svm-project/svm/test/framework"
)

// testMixedFaults breaks 18% of all requests (discovery, lists and writes)
// with every kind of fault at once. The migration completes without a
// failed object, each broken request costs exactly one more, and all of
// them together stay within 1.5 requests per object.
func testMixedFaults(t *testing.T, f *fixture) {
	before := f.flip(t)
	rates := framework.FaultRates{
		framework.Reset: 0.03, framework.InternalError: 0.03, framework.Unavailable: 0.03, framework.Throttle: 0.02,
		framework.Slow: 0.03, framework.Stall: 0.01, framework.Truncate: 0.03,
	}
	proxy := f.env.StartFaultProxy(t, framework.FaultOptions{Rates: rates})
	writesBefore := f.serverWrites(t)
	// A stalled answer costs a worker the request timeout; a short one
	// keeps the test short, and it is far above what a healthy loopback
	// API server needs.
	opts := migrator.Options{RequestTimeout: 2 * time.Second}
	m := newMigrator(t, proxy.Config, opts)
	res, err := m.Run(framework.Context(t, 3*time.Minute), migrator.Request{Resource: framework.Widgets})
	proxy.WaitIdle(t)
	log := proxy.Requests()
	t.Log(log)
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	expectProgress(t, res.Progress, f.objects)
	for fault := range rates {
		if log.Count(fault) == 0 {
			t.Errorf("no request got fault %q: the scenario did not exercise it", fault)
		}
	}
	expectOneRepeatPerFailure(t, log)
	if limit := f.objects * 3 / 2; len(log) > limit {
		t.Errorf("%d requests for %d objects, want at most %d", len(log), f.objects, limit)
	}
	expectSkips(t, log, res.Progress.Skipped())
	writes := f.serverWrites(t) - writesBefore
	expectWrites(t, log, writes)
	verified := f.expectMigrated(t, before)
	framework.Scenario{Name: "mixed faults (18% of requests)", Objects: f.objects, Writes: writes,
		Retries: log.Filter(isMigration).Repeats(), Verified: verified}.Report(t)
}

// testLongRetryAfter throttles a list and some writes with Retry-After of
// up to four seconds, and one write more often in a row than client-go
// retries by itself, so that the engine's own retry has to honour the
// server's wait too. No throttled request comes back sooner than it was
// told, and the migration takes at least the sum of the waits that follow
// one another.
func testLongRetryAfter(t *testing.T, f *fixture) {
	before := f.flip(t)
	proxy := f.env.StartFaultProxy(t, framework.FaultOptions{})
	const (
		listWait = 3 * time.Second
		// client-go repeats a throttled request up to 10 times; the 11th
		// 429 is the engine's to handle.
		chainLength = 11
		chainWait   = time.Second
		writeWait   = 4 * time.Second
	)
	type plan struct {
		left int
		wait time.Duration
	}
	plans := map[string]*plan{"list": {1, listWait}, "widget-00001": {chainLength, chainWait}}
	for i := 2; i < 10; i++ {
		plans[fmt.Sprintf("widget-%05d", i)] = &plan{1, writeWait}
	}
	proxy.Decide(func(r *http.Request) (framework.Fault, time.Duration, bool) {
		name := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
		switch {
		case r.Method == http.MethodGet && name == "widgets" && r.URL.Query().Get("continue") == "":
			name = "list"
		case r.Method != http.MethodPatch:
			return framework.NoFault, 0, false
		}
		if p := plans[name]; p != nil && p.left > 0 {
			p.left--
			return framework.Throttle, p.wait, true
		}
		return framework.NoFault, 0, false
	})
	writesBefore := f.serverWrites(t)
	// Without adaptive pacing: the gaps measured are the retries' alone.
	// A 429 halves the pacer's window, and client-go waits out a
	// Retry-After inside the request, holding its place in the window;
	// on a busy machine the window is down to one, and another object's
	// 4s wait then delays widget-00001's retry by as much. That is
	// pacing, shown by the adaptive pacing scenario, not backoff.
	m := newMigrator(t, proxy.Config, migrator.Options{DisablePacing: true})
	start := time.Now()
	res, err := m.Run(framework.Context(t, 3*time.Minute), migrator.Request{Resource: framework.Widgets})
	took := time.Since(start)
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	expectProgress(t, res.Progress, f.objects)
	proxy.WaitIdle(t)
	log := proxy.Requests().Filter(isWidgets)

	// Every throttled request came back no sooner than it was told, and
	// not much later either: the wait is the server's, not compounded by
	// svm's own backoff.
	throttledAt := map[string]framework.FaultRecord{}
	for _, r := range log {
		if prev, ok := throttledAt[r.Key()]; ok {
			if gap := r.Time.Sub(prev.Time); gap < prev.RetryAfter || gap > prev.RetryAfter+5*time.Second {
				t.Errorf("%s %s repeated %s after a 429 with Retry-After %s", r.Method, r.Path, gap.Round(time.Millisecond), prev.RetryAfter)
			}
			delete(throttledAt, r.Key())
		}
		if r.Fault == framework.Throttle {
			throttledAt[r.Key()] = r
		}
	}
	// Each throttled request was sent once more per 429, and no other
	// request was repeated.
	throttles := 1 + chainLength + 8
	if got := log.Count(framework.Throttle); got != throttles {
		t.Errorf("%d requests throttled, want %d", got, throttles)
	}
	if got := log.Repeats(); got != throttles {
		t.Errorf("%d requests repeated, want %d (one per 429)", got, throttles)
	}
	// The list's wait comes before any write, and the chain's waits follow
	// one another: the migration cannot be quicker than their sum.
	least := listWait + chainLength*chainWait
	if took < least {
		t.Errorf("took %s, want at least %s (the waits asked for in a row)", took.Round(time.Millisecond), least)
	}
	t.Logf("took %s; the waits asked for in a row add up to %s", took.Round(time.Millisecond), least)
	writes := f.serverWrites(t) - writesBefore
	verified := f.expectMigrated(t, before)
	framework.Scenario{Name: "Retry-After up to 4s, 11 in a row", Objects: f.objects, Writes: writes,
		Retries: log.Repeats(), Verified: verified}.Report(t)
}

// testOutageLongerThanRetries fails every request, first with 500s and
// then with resets, for longer than the engine's retries last. The engine
// stops at once with an error that is not terminal, instead of marking the
// objects it could not reach as failed (which would end the migration
// Failed for good); resumed from the state it returned, as the controller
// resumes a migration after its backoff, it completes.
func testOutageLongerThanRetries(t *testing.T, f *fixture) {
	before := f.flip(t)
	proxy := f.env.StartFaultProxy(t, framework.FaultOptions{})
	// A short backoff, so that the outage outlasts it in a few seconds:
	// sleeps of 25-50, 50-100, 100-200 and 200-400ms, 750ms at most.
	opts := migrator.Options{ChunkSize: 50, Retry: migrator.Backoff{Initial: 50 * time.Millisecond, Max: 400 * time.Millisecond, Attempts: 5}}
	const phase = 2 * time.Second
	writesBefore := f.serverWrites(t)
	ctx := framework.Context(t, 3*time.Minute)
	type window struct{ start, end time.Time }
	outage := make(chan window, 1)
	go func() {
		// Begin once a third of the objects are written: mid-chunk, with
		// every worker busy.
		for proxy.Requests().Writes() < f.objects/3 && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		var w window
		w.start = time.Now()
		proxy.FailAll(framework.InternalError)
		time.Sleep(phase)
		proxy.FailAll(framework.Reset)
		time.Sleep(phase)
		proxy.FailAll(framework.NoFault)
		w.end = time.Now()
		outage <- w
	}()
	m := newMigrator(t, proxy.Config, opts)
	res, err := m.Run(ctx, migrator.Request{Resource: framework.Widgets})
	stopped := time.Now()
	w := <-outage
	var terminal *migrator.TerminalError
	var objectsFailed *migrator.ObjectsFailedError
	switch {
	case err == nil:
		t.Fatalf("the migration completed through an outage that outlasted its retries")
	case errors.As(err, &terminal), errors.As(err, &objectsFailed):
		t.Fatalf("migrate: %v (%T), want an error to retry later", err, err)
	case !migrator.IsTransient(err):
		t.Errorf("migrate: %v, want a transient error", err)
	}
	t.Logf("stopped %s into the outage: %v", stopped.Sub(w.start).Round(time.Millisecond), err)
	if !stopped.Before(w.end) {
		t.Errorf("stopped %s after the outage began, when it had ended: it should stop once a retry chain is exhausted", stopped.Sub(w.start))
	}
	if res.Progress.Failed != 0 || len(res.FailedObjects) != 0 {
		t.Errorf("%d objects failed (%v): an outage is no object's fault", res.Progress.Failed, res.FailedObjects)
	}
	// Each of the workers sent at most its retries' worth, and then
	// nothing more until resumed.
	proxy.WaitIdle(t)
	during := proxy.Requests().Between(w.start, w.end)
	if limit := 8 * opts.Retry.Attempts; len(during) > limit {
		t.Errorf("%d requests during the outage, want at most %d (8 workers, %d attempts each)", len(during), limit, opts.Retry.Attempts)
	}
	t.Logf("during the outage: %v", during)

	res, err = m.Run(ctx, migrator.Request{Resource: framework.Widgets, Resume: &res.State})
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	// The state returned with the error was the last completed chunk's, so
	// the chunk in flight is handled again but counted once.
	expectProgress(t, res.Progress, f.objects)
	writes := f.serverWrites(t) - writesBefore
	verified := f.expectMigrated(t, before)
	framework.Scenario{Name: "outage longer than the retries (engine)", Objects: f.objects, Writes: writes,
		Retries: proxy.Requests().Filter(isMigration).Repeats(), Verified: verified}.Report(t)
}
