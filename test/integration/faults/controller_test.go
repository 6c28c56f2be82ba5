package faults_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/framework"
)

// chainRequests is the most requests one retry chain of the engine's
// default backoff (Options.Retry: 200ms doubling to 30s, each sleep at
// least half its delay, 10 attempts) can send within d: the n-th request
// goes out at least 100ms·(2^(n-1)-1) after the first.
func chainRequests(d time.Duration) int {
	const attempts = 10
	n, elapsed, delay := 1, time.Duration(0), 200*time.Millisecond
	for n < attempts {
		if elapsed += delay / 2; elapsed > d {
			break
		}
		n++
		delay = min(2*delay, 30*time.Second)
	}
	return n
}

// testControllerOutage runs `svm controller` through the fault proxy and,
// in the middle of a migration, fails every request it sends: 500s for 6s,
// then connection resets for 6s. Meanwhile svm's request rate stays within
// what the engine's backoff allows, the migration is never marked Failed,
// and once the outage is over it completes.
func testControllerOutage(t *testing.T, f *fixture) {
	const (
		workers = 8 // svm controller's default --workers
		phase   = 6 * time.Second
		outage  = 2 * phase
	)
	objects := f.objects
	before := f.flip(t)
	proxy := f.env.StartFaultProxy(t, framework.FaultOptions{})
	// --qps makes the migration last about 8s, so that the outage catches
	// it in the middle; during the outage svm sends far less than that.
	proxy.StartSVM(t, framework.ControllerArgs("--trigger=false", "--leader-elect=false",
		"--chunk-size", "200", "--qps", fmt.Sprint(max(20, objects/8)))...)
	writesBefore := f.serverWrites(t)
	m := f.env.CreateMigration(t, "widgets", framework.Widgets)
	widgetWrites := func() int { return proxy.Requests().Filter(isWidgets).Writes() }
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return widgetWrites() >= objects/6, nil
	})
	if err != nil {
		t.Fatalf("the migration did not start writing: %d writes", widgetWrites())
	}

	start := time.Now()
	var seen []string // the Running condition's reasons during the outage
	for _, fault := range []framework.Fault{framework.InternalError, framework.Reset} {
		proxy.FailAll(fault)
		for end := time.Now().Add(phase); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
			got := f.env.GetMigration(t, m.Name)
			if c := framework.Condition(got, migrationv1alpha1.MigrationFailed); c.Status == corev1.ConditionTrue {
				t.Fatalf("the migration failed during the outage: %s: %s", c.Reason, c.Message)
			}
			if c := framework.Condition(got, migrationv1alpha1.MigrationRunning); !slices.Contains(seen, c.Reason) {
				seen = append(seen, c.Reason)
			}
		}
	}
	proxy.FailAll(framework.NoFault)
	end := time.Now()
	t.Logf("the Running condition's reasons during the outage: %q", seen)

	done := f.env.WaitMigration(t, m.Name, 3*time.Minute, "finished after the outage", framework.Finished)
	if !framework.Succeeded(done) {
		t.Fatalf("the migration did not succeed after the outage: status %+v", done.Status)
	}
	t.Logf("succeeded %s after the outage", time.Since(end).Round(time.Millisecond))
	if p := done.Status.Progress; p.Migrated()+p.Skipped() != int64(objects) || p.Failed != 0 {
		t.Errorf("progress %+v: want %d rewritten or skipped, none failed", p, objects)
	}

	// Every worker is in one retry chain for the whole outage (none can
	// succeed, and none gives up so soon), and a migration lists or
	// writes, never both: at most workers chains of writes, or one of
	// lists, whose GETs client-go repeats by itself after 1s when the
	// connection broke.
	//
	// The bound is the one of the outage as it really lasted: the phases
	// end only after the test's last look at the migration, which a busy
	// API server may answer seconds late.
	proxy.WaitIdle(t)
	log := proxy.Requests()
	during := log.Between(start, end)
	migration := during.Filter(isWidgets)
	lasted := end.Sub(start)
	bound := max(workers*chainRequests(lasted), chainRequests(lasted)+int(lasted/time.Second))
	peak := peakPerSecond(migration)
	t.Logf("during the %s outage (%s planned): %v; the migration's own: %v (bound %d), at most %d in one second", lasted.Round(time.Millisecond), outage, during, migration, bound, peak)
	if len(migration) > bound {
		t.Errorf("svm sent %d requests for widgets during a %s outage, want at most %d (%.1f/s)", len(migration), lasted.Round(time.Millisecond), bound, float64(bound)/lasted.Seconds())
	}
	// In any one second a chain sends at most 4 requests: the sleeps
	// before the 2nd to 5th add up to at least 100+200+400+800ms.
	if peak > workers*4 {
		t.Errorf("svm sent up to %d requests for widgets in one second of the outage, want at most %d", peak, workers*4)
	}
	writes := f.serverWrites(t) - writesBefore
	verified := f.expectMigrated(t, before)
	framework.Scenario{Name: fmt.Sprintf("controller through a %s outage", outage), Objects: objects, Writes: writes,
		Retries: log.Filter(isMigration).Repeats(), Verified: verified}.Report(t)
}

// peakPerSecond is the most requests of log that arrived within any one
// second.
func peakPerSecond(log framework.FaultLog) int {
	peak := 0
	for i := range log {
		j := i
		for j < len(log) && log[j].Time.Sub(log[i].Time) < time.Second {
			j++
		}
		peak = max(peak, j-i)
	}
	return peak
}
