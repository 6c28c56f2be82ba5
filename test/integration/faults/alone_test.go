package faults_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/svm-project/svm/internal/migrator"
	"github.com/svm-project/svm/test/framework"
)

// testFaultAlone breaks a share rate of all requests (discovery, lists and
// writes) with one kind of fault. The migration completes and verifies;
// each broken request costs exactly one more, and only writes whose answer
// was lost after the server applied them end as skips.
func testFaultAlone(t *testing.T, f *fixture, fault framework.Fault, rate float64) {
	before := f.flip(t)
	proxy := f.env.StartFaultProxy(t, framework.FaultOptions{Rates: framework.FaultRates{fault: rate}})
	writesBefore := f.serverWrites(t)
	// More workers than the default absorb the waits (Retry-After, delays,
	// timeouts) of so many broken requests; the request timeout is short
	// for the same reason, yet above what the delay of Slow needs.
	opts := migrator.Options{Workers: 16, RequestTimeout: time.Second}
	m := newMigrator(t, proxy.Config, opts)
	start := time.Now()
	// Some draws of 30% 429 take about three minutes on a quiet machine
	// (each 429 answered with a Retry-After that client-go waits out, the
	// window cut to one write); five leave room for a loaded one.
	res, err := m.Run(framework.Context(t, 5*time.Minute), migrator.Request{Resource: framework.Widgets})
	proxy.WaitIdle(t)
	log := proxy.Requests()
	t.Logf("%v in %s", log, time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	expectProgress(t, res.Progress, f.objects)
	if got := log.Count(fault); float64(got) < rate/2*float64(len(log)) {
		t.Errorf("only %d of %d requests got fault %q", got, len(log), fault)
	}
	expectOneRepeatPerFailure(t, log)
	expectSkips(t, log, res.Progress.Skipped())
	writes := f.serverWrites(t) - writesBefore
	expectWrites(t, log, writes)
	verified := f.expectMigrated(t, before)
	framework.Scenario{Name: fmt.Sprintf("%.0f%% %s", rate*100, fault), Objects: f.objects, Writes: writes,
		Retries: log.Filter(isMigration).Repeats(), Verified: verified}.Report(t)
}
