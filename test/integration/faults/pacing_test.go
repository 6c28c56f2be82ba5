package faults_test

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/svm-project/svm/internal/migrator"
	"github.com/svm-project/svm/test/framework"
)

// testAdaptivePacing turns the API server, in the middle of a migration,
// into one that is saturated at one write at a time (the fault proxy's
// one seat: more writes in flight only queue, and wait longer): svm must
// see that its rate no longer grows with its writes in flight and bring
// them down toward the seat's knee, without losing the seat's rate, and
// speed up again once the server has room.
//
// The seat's knee is not quite one write: a window of one leaves the seat
// idle while svm turns an answer into its next write, and a few more in
// flight hide that turn. With a seat of 40 ms (a full run's log of
// 2026-12-07) the turn was about a tenth of the seat's time on a loaded machine,
// the curve rose by about 5% a doubling up to a few writes, and the
// pacer's noise-driven walk along that almost-flat curve reached the 16
// workers. The seat holds each write 100 ms: the turn is then a few
// percent of it, the curve is flat from two writes on, and the knee by
// the 0.95 rule lies at one or two writes, the window at up to 1.4 times
// it. The scenario wants the 16 workers cut to 10 or fewer.
func testAdaptivePacing(t *testing.T, f *fixture) {
	before := f.flip(t)
	const workers = 16
	proxy := f.env.StartFaultProxy(t, framework.FaultOptions{})
	decisions := &paceLog{}
	m := newMigrator(t, proxy.Config, migrator.Options{Workers: workers, ChunkSize: 100, Observer: decisions})
	done := make(chan error, 1)
	var res migrator.Result
	go func() {
		var err error
		res, err = m.Run(framework.Context(t, 10*time.Minute), migrator.Request{Resource: framework.Widgets})
		done <- err
	}()
	isWrite := func(r framework.FaultRecord) bool { return r.Method == http.MethodPatch }
	waitWrites(t, proxy, 200)
	// The phases are counted in answers through the seat, not in time: a
	// busy machine slows the seat and the pacer alike. The pacer decides
	// once per epoch of at least twice its window in answers; from 16
	// writes in flight it sees the surge within about a hundred answers
	// (two slow epochs in a row: one may be a stall), then looks for the
	// knee below the halved window. The pacer's unit test finds it within
	// 450 answers for every draw of a noise of a quarter per answer; the
	// scenario gives it 500.
	const converge, watch = 500, 200
	const hold = 100 * time.Millisecond
	slowFrom := time.Now()
	proxy.OneAtATime(hold)
	slowCheck := waitSeated(t, proxy, converge)
	fastFrom := waitSeated(t, proxy, converge+watch)
	proxy.OneAtATime(0)
	if err := <-done; err != nil {
		t.Fatalf("migrate: %v", err)
	}
	end := time.Now()
	proxy.WaitIdle(t)
	expectProgress(t, res.Progress, f.objects)

	writes := proxy.Requests().Filter(isWrite)
	slow, busy := inFlight(writes, slowCheck, fastFrom)
	seatRate := float64(len(writes.Between(slowCheck, fastFrom))) / fastFrom.Sub(slowCheck).Seconds()
	after := writes.Between(fastFrom, end)
	afterRate := float64(len(after)) / end.Sub(fastFrom).Seconds()
	t.Logf("one seat held %s more per write: %d answers through it in %s; over the next %d, writes in flight at most %d, the seat busy %.0f%% of the time, %.1f writes/s; after it %.1f writes/s",
		hold, converge, slowCheck.Sub(slowFrom).Round(time.Millisecond), watch, slow, 100*busy, seatRate, afterRate)
	const most = workers * 5 / 8
	if slow > most {
		t.Errorf("%d writes in flight on a server that answers one at a time, want them cut to %d of the %d workers or fewer; the decisions from the seat on: %s",
			slow, most, workers, decisions.between(slowFrom, fastFrom))
	}
	// Fewer writes in flight must not cost the seat's rate: the seat is
	// idle only while no write is at the proxy, in the moment between an
	// answer and the next write of a window of one.
	if busy < 0.8 {
		t.Errorf("the seat busy %.0f%% of the time, want at least 80%%: the window is below the knee", 100*busy)
	}
	// Once the seat is gone, the server answers several times as fast as
	// the seat let it: the pacer must see the relief within an epoch or
	// two of answers at the new rate, forget the seat's points and grow,
	// twice in a row (as it does while it has fewer than three points),
	// not hold the window until those points age out (a single grow now
	// and then is its probe on the seat). Judged by the pacer's
	// decisions: how far it grows is the machine's to say, as is the
	// rate.
	released := decisions.after(fastFrom, 4)
	t.Logf("window at most %d on the seat; the first decisions after it: %s", decisions.maxWindow(slowCheck, fastFrom), released)
	if !released.grewTwiceInARow() {
		t.Errorf("no two grows in a row in the first %d decisions after the seat (%.1f writes/s after it, %.1f on it): the pacer did not see the relief",
			len(released.decisions), afterRate, seatRate)
	}
	verified := f.expectMigrated(t, before)
	framework.Scenario{Name: fmt.Sprintf("adaptive pacing: %d answers from a one-seat server", converge+watch), Objects: f.objects, Writes: len(writes), Retries: -1, Verified: verified}.Report(t)
}

// paceLog records the pacer's decisions.
type paceLog struct {
	migrator.NopObserver
	mu        sync.Mutex
	decisions []paceDecision
}

type paceDecision struct {
	at    time.Time
	state migrator.PacerState
}

// Paced implements migrator.Observer.
func (l *paceLog) Paced(_ schema.GroupResource, s migrator.PacerState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.decisions = append(l.decisions, paceDecision{time.Now(), s})
}

// maxWindow is the largest window decided between from and to.
func (l *paceLog) maxWindow(from, to time.Time) int {
	most := 0
	for _, d := range l.between(from, to).decisions {
		most = max(most, d.state.Window)
	}
	return most
}

// after is the first n decisions after from.
func (l *paceLog) after(from time.Time, n int) *paceLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	i, _ := slices.BinarySearchFunc(l.decisions, from, func(d paceDecision, t time.Time) int { return d.at.Compare(t) })
	return &paceLog{decisions: slices.Clone(l.decisions[i:min(len(l.decisions), i+n)])}
}

// between is the decisions between from and to.
func (l *paceLog) between(from, to time.Time) *paceLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	var in []paceDecision
	for _, d := range l.decisions {
		if !d.at.Before(from) && !d.at.After(to) {
			in = append(in, d)
		}
	}
	return &paceLog{decisions: in}
}

// grewTwiceInARow reports whether two decisions in a row were grows.
func (l *paceLog) grewTwiceInARow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := 1; i < len(l.decisions); i++ {
		if l.decisions[i-1].state.Decision == migrator.PacerGrow && l.decisions[i].state.Decision == migrator.PacerGrow {
			return true
		}
	}
	return false
}

func (l *paceLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for i, d := range l.decisions {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s to %d (%s latency", d.state.Decision, d.state.Window, d.state.SmoothedLatency.Round(time.Millisecond))
		if d.state.Knee > 0 {
			fmt.Fprintf(&b, ", knee %.1f", d.state.Knee)
		}
		b.WriteString(")")
	}
	return b.String()
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

// inFlight is the most requests of log in progress at once between from
// and to, and the share of that time at least one was.
func inFlight(log framework.FaultLog, from, to time.Time) (peak int, busy float64) {
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
	n, last := 0, from
	var busyTime time.Duration
	for _, e := range edges {
		at := e.at
		if at.Before(from) {
			at = from
		} else if at.After(to) {
			at = to
		}
		if n > 0 {
			busyTime += at.Sub(last)
		}
		last = at
		n += e.delta
		if !e.at.Before(from) && !e.at.After(to) {
			peak = max(peak, n)
		}
	}
	if n > 0 {
		busyTime += to.Sub(last)
	}
	return peak, busyTime.Seconds() / to.Sub(from).Seconds()
}

// waitSeated waits until the proxy has answered n requests through its
// seat, and returns when.
func waitSeated(t *testing.T, proxy *framework.FaultProxy, n int) time.Time {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		if len(proxy.Requests().Filter(func(r framework.FaultRecord) bool { return r.Seated && r.Forwarded })) >= n {
			return time.Now()
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("fewer than %d answers through the seat within 3 minutes", n)
	return time.Time{}
}
