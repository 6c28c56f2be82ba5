package faults_test

import (
	"net/http"
	"sort"
	"testing"
	"time"

	"github.com/svm-project/svm/internal/migrator"
	"github.com/svm-project/svm/test/framework"
)

// testAdaptivePacing slows every answer down in the middle of a migration,
// as an overloaded API server would: svm must cut the writes it has in
// flight multiplicatively within a few round trips, and grow them back when
// the answers are fast again.
func testAdaptivePacing(t *testing.T, f *fixture) {
	before := f.flip(t)
	const workers = 16
	proxy := f.env.StartFaultProxy(t, framework.FaultOptions{Delay: 400 * time.Millisecond})
	m := newMigrator(t, proxy.Config, migrator.Options{Workers: workers, ChunkSize: 100})
	done := make(chan error, 1)
	var res migrator.Result
	go func() {
		var err error
		res, err = m.Run(framework.Context(t, 5*time.Minute), migrator.Request{Resource: framework.Widgets})
		done <- err
	}()
	waitWrites(t, proxy, 200)
	slowFrom := time.Now()
	proxy.FailAll(framework.Slow)
	time.Sleep(6 * time.Second)
	fastFrom := time.Now()
	proxy.FailAll(framework.NoFault)
	if err := <-done; err != nil {
		t.Fatalf("migrate: %v", err)
	}
	proxy.WaitIdle(t)
	expectProgress(t, res.Progress, f.objects)

	writes := proxy.Requests().Filter(func(r framework.FaultRecord) bool { return r.Method == http.MethodPatch })
	fast := peakInFlight(writes, slowFrom.Add(-2*time.Second), slowFrom)
	// Two seconds into the slow phase: several 400 ms round trips.
	slow := peakInFlight(writes, slowFrom.Add(2*time.Second), fastFrom)
	// Once the answers are fast again the window grows back (additively,
	// one write per window of answers: TestPacer* in internal/migrator
	// show the arithmetic, which a loopback server's timing cannot).
	recovered := peakInFlight(writes, fastFrom.Add(time.Second), time.Now())
	t.Logf("writes in flight at most: %d before the slowdown, %d during it, %d after it", fast, slow, recovered)
	if fast < workers/2 {
		t.Errorf("%d writes in flight on a fast server, want near the %d workers", fast, workers)
	}
	if slow > 2 {
		t.Errorf("%d writes in flight while every answer took 400ms, want the window cut to 1 or 2", slow)
	}
	if recovered < workers/2 {
		t.Errorf("%d writes in flight after the slowdown ended, want the window grown back near the %d workers", recovered, workers)
	}
	verified := f.expectMigrated(t, before)
	framework.Scenario{Name: "adaptive pacing: 6s of 400ms answers", Objects: f.objects, Writes: len(writes), Retries: -1, Verified: verified}.Report(t)
}

func waitWrites(t *testing.T, proxy *framework.FaultProxy, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if len(proxy.Requests().Filter(func(r framework.FaultRecord) bool { return r.Method == http.MethodPatch })) >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("fewer than %d writes within a minute", n)
}

// peakInFlight is the most requests of log in progress at once between
// from and to.
func peakInFlight(log framework.FaultLog, from, to time.Time) int {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for _, r := range log {
		end := r.Time.Add(r.Duration)
		if r.Duration == 0 || end.Before(from) || r.Time.After(to) {
			continue
		}
		edges = append(edges, edge{r.Time, +1}, edge{end, -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].delta < edges[j].delta
		}
		return edges[i].at.Before(edges[j].at)
	})
	n, peak := 0, 0
	for _, e := range edges {
		n += e.delta
		if !e.at.Before(from) && !e.at.After(to) {
			peak = max(peak, n)
		}
	}
	return peak
}
