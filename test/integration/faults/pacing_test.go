package faults_test

import (
	"net/http"
	"slices"
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
	proxy := f.env.StartFaultProxy(t, framework.FaultOptions{})
	m := newMigrator(t, proxy.Config, migrator.Options{Workers: workers, ChunkSize: 100})
	done := make(chan error, 1)
	var res migrator.Result
	go func() {
		var err error
		res, err = m.Run(framework.Context(t, 5*time.Minute), migrator.Request{Resource: framework.Widgets})
		done <- err
	}()
	isWrite := func(r framework.FaultRecord) bool { return r.Method == http.MethodPatch }
	waitWrites(t, proxy, 200)
	// The slowdown is one the pacer must read as congestion however busy
	// the machine: answers at least six times as slow as the server's
	// usual ones (its fastest are faster still), and at least 400ms, past
	// the pacer's 4x its fastest answer. On an idle server that is 400ms;
	// on two cores shared with other suites the usual answer takes tens or
	// hundreds of milliseconds. The phases are measured in round trips of
	// the slowed answers, rt: the window halves at most once a round trip,
	// so from 16 it is down to 2 after about four, and the writes sent
	// before are answered one round trip later.
	usual := medianDuration(proxy.Requests().Filter(isWrite))
	delay := max(400*time.Millisecond, 5*usual)
	rt := delay + usual
	slowFrom := time.Now()
	proxy.SlowAll(delay)
	time.Sleep(12 * rt)
	fastFrom := time.Now()
	proxy.FailAll(framework.NoFault)
	if err := <-done; err != nil {
		t.Fatalf("migrate: %v", err)
	}
	proxy.WaitIdle(t)
	expectProgress(t, res.Progress, f.objects)

	writes := proxy.Requests().Filter(isWrite)
	fast := peakInFlight(writes, slowFrom.Add(-5*rt), slowFrom)
	slow := peakInFlight(writes, slowFrom.Add(5*rt), fastFrom)
	// Once the answers are fast again the window grows back (additively,
	// one write per window of answers: TestPacer* in internal/migrator
	// show the arithmetic, which a loopback server's timing cannot).
	recovered := peakInFlight(writes, fastFrom.Add(time.Second), time.Now())
	t.Logf("usual answer %s, slowed by %s: writes in flight at most %d before the slowdown, %d from %s into it, %d after it",
		usual.Round(time.Millisecond), delay.Round(time.Millisecond), fast, slow, (5 * rt).Round(time.Millisecond), recovered)
	if fast < workers/2 {
		t.Errorf("%d writes in flight on a fast server, want near the %d workers", fast, workers)
	}
	if slow > 2 {
		t.Errorf("%d writes in flight while every answer took %s more, want the window cut to 1 or 2", slow, delay.Round(time.Millisecond))
	}
	if recovered < workers/2 {
		t.Errorf("%d writes in flight after the slowdown ended, want the window grown back near the %d workers", recovered, workers)
	}
	verified := f.expectMigrated(t, before)
	framework.Scenario{Name: "adaptive pacing: 12 round trips of slowed answers", Objects: f.objects, Writes: len(writes), Retries: -1, Verified: verified}.Report(t)
}

// medianDuration is the median time the proxy took to answer the
// requests of log.
func medianDuration(log framework.FaultLog) time.Duration {
	var ds []time.Duration
	for _, r := range log {
		if r.Duration > 0 {
			ds = append(ds, r.Duration)
		}
	}
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2]
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
