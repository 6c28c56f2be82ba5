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

// testAdaptivePacing turns the API server, in the middle of a migration,
// into one that is saturated at one write at a time (the fault proxy's
// one seat: more writes in flight only queue, and wait longer): svm must
// see that its rate no longer grows with its writes in flight and bring
// them down toward the knee of one write, without losing the seat's rate,
// and speed up again once the server has room.
func testAdaptivePacing(t *testing.T, f *fixture) {
	before := f.flip(t)
	const workers = 16
	proxy := f.env.StartFaultProxy(t, framework.FaultOptions{})
	m := newMigrator(t, proxy.Config, migrator.Options{Workers: workers, ChunkSize: 100})
	done := make(chan error, 1)
	var res migrator.Result
	go func() {
		var err error
		res, err = m.Run(framework.Context(t, 10*time.Minute), migrator.Request{Resource: framework.Widgets})
		done <- err
	}()
	isWrite := func(r framework.FaultRecord) bool { return r.Method == http.MethodPatch }
	waitWrites(t, proxy, 200)
	// Each write holds the seat for hold and for the server's own answer,
	// s in all. The phases are measured in answers of s: the pacer
	// decides once per epoch of at least twice its window in answers, so
	// from 16 writes in flight it needs about a hundred answers to see the
	// queue and cut the window. It then steps toward one write by a tenth
	// every other epoch, when the step below keeps 0.95 of the best rate
	// measured; on a busy machine the noise in each epoch's rate fails
	// some steps, so the phase gives it some twenty epochs. A busy
	// machine's slower server only makes s longer.
	usual := medianDuration(proxy.Requests().Filter(isWrite))
	hold := max(40*time.Millisecond, usual)
	s := hold + usual
	slowFrom := time.Now()
	proxy.OneAtATime(hold)
	time.Sleep(500 * s)
	fastFrom := time.Now()
	proxy.OneAtATime(0)
	if err := <-done; err != nil {
		t.Fatalf("migrate: %v", err)
	}
	end := time.Now()
	proxy.WaitIdle(t)
	expectProgress(t, res.Progress, f.objects)

	writes := proxy.Requests().Filter(isWrite)
	slowCheck := slowFrom.Add(400 * s)
	slow := peakInFlight(writes, slowCheck, fastFrom)
	seated := writes.Between(slowCheck, fastFrom)
	after := writes.Between(fastFrom.Add(time.Second), end)
	seatRate := float64(len(seated)) / fastFrom.Sub(slowCheck).Seconds()
	afterRate := float64(len(after)) / end.Sub(fastFrom.Add(time.Second)).Seconds()
	t.Logf("usual answer %s, one seat held %s more per write (at most %.1f writes/s): from %s into it, writes in flight at most %d and %.1f writes/s; after it %.1f writes/s",
		usual.Round(time.Millisecond), hold.Round(time.Millisecond), 1/s.Seconds(), (400 * s).Round(time.Millisecond), slow, seatRate, afterRate)
	if slow > workers/2 {
		t.Errorf("%d writes in flight on a server that answers one at a time, want them cut to half the %d workers or fewer", slow, workers)
	}
	// Fewer writes in flight must not cost the seat's rate.
	if seatRate < 0.8/s.Seconds() {
		t.Errorf("%.1f writes/s through the one seat, want its %.1f", seatRate, 1/s.Seconds())
	}
	if afterRate < 3*seatRate {
		t.Errorf("%.1f writes/s once the server had room again, want at least 3 times the seat's %.1f", afterRate, seatRate)
	}
	verified := f.expectMigrated(t, before)
	framework.Scenario{Name: "adaptive pacing: 500 answers from a one-seat server", Objects: f.objects, Writes: len(writes), Retries: -1, Verified: verified}.Report(t)
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
