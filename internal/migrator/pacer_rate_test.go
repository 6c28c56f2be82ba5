package migrator

import (
	"container/heap"
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

func TestRateWindow(t *testing.T) {
	tests := []struct {
		name    string
		qps     float64
		latency time.Duration
		most    float64
		want    int
	}{
		{"a write ends before the next is due", 100, 5 * time.Millisecond, 64, 1},
		{"the rate needs a little under one", 100, 9 * time.Millisecond, 64, 1},
		{"the rate needs a little over one: one, not two", 100, 14 * time.Millisecond, 64, 1},
		{"one and a half: two", 100, 15 * time.Millisecond, 64, 2},
		{"a slow server", 100, 100 * time.Millisecond, 64, 10},
		{"never past the workers", 1000, time.Second, 64, 64},
		{"a rate under one per second", 0.5, 20 * time.Millisecond, 64, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := rateWindow(tt.qps, tt.latency, tt.most); got != tt.want {
				t.Errorf("rateWindow(%v, %s, %v) = %d, want %d", tt.qps, tt.latency, tt.most, got, tt.want)
			}
		})
	}
}

// runAt simulates d of a migration under a rate cap of qps with a burst
// of one, as the engine sends it: a write waits for room in the pacer's
// window, then for its turn at the cap. It returns the answers per
// second, the mean writes in flight, and the most that were in flight.
func (s *simulation) runAt(qps float64, d time.Duration) (rate, inflight float64, most int) {
	s.t.Helper()
	s.p.qps = qps
	interval := time.Duration(float64(time.Second) / qps)
	start, answered := s.clock.t, s.answered
	end := s.clock.t.Add(d)
	due := s.clock.t
	area := 0.0
	for s.clock.t.Before(end) {
		room := s.p.inflight < s.p.room()
		if room && !due.After(s.clock.t) {
			tk, err := s.p.acquire(context.Background())
			if err != nil {
				s.t.Fatal(err)
			}
			latency, throttled := s.server(s.clock.t, s.p.inflight)
			heap.Push(&s.queue, pending{ticket: tk, at: s.clock.t.Add(latency), latency: latency, throttled: throttled})
			most = max(most, s.p.inflight)
			// A bucket of one token: the next is due an interval after
			// this send, however long the write waited for room.
			due = s.clock.t.Add(interval)
			continue
		}
		next := s.clock.t.Add(time.Hour)
		if s.queue.Len() > 0 {
			next = s.queue[0].at
		}
		if room && due.Before(next) {
			next = due
		}
		area += float64(s.p.inflight) * next.Sub(s.clock.t).Seconds()
		s.clock.t = next
		if s.queue.Len() > 0 && !s.queue[0].at.After(s.clock.t) {
			a := heap.Pop(&s.queue).(pending)
			s.p.release(a.ticket, a.latency, outcomeOf(a.throttled))
			s.answered++
		}
	}
	elapsed := s.clock.t.Sub(start).Seconds()
	return float64(s.answered-answered) / elapsed, area / elapsed, most
}

func TestPacerUnderARateCapKeepsWhatTheRateNeedsInFlight(t *testing.T) {
	// Servers like that of TestPacerFindsTheKneeOfALinearServer (2.5ms
	// more for every write in flight), under a cap of 100 writes/s that
	// they reach with a write or two in flight: the window has nothing to
	// learn, and holds.
	for _, tt := range []struct {
		name string
		// base is a write's time on its own, less 2.5ms.
		base  time.Duration
		noise float64
		// most is the writes in flight the rate allows at that latency:
		// qps times it, to the nearest whole write.
		most int
		// least is the fewest writes per second the cap of 100 must
		// give: all of it, but where one write at a time cannot reach
		// it (answers slower than the 10ms between two writes).
		least float64
	}{
		{"7.5ms a write", 5 * time.Millisecond, 0, 1, 97},
		{"7.5ms a write, every answer up to a quarter faster or slower", 5 * time.Millisecond, 0.25, 1, 97},
		{"9.5ms a write", 7 * time.Millisecond, 0, 1, 97},
		// Answers of up to 11.9ms: the slow ones cost rate, not a
		// second write beside them.
		{"9.5ms a write, every answer up to a quarter faster or slower", 7 * time.Millisecond, 0.25, 1, 93},
		// The rate needs 1.2 writes: one at a time, 83 writes/s.
		{"12ms a write", 9500 * time.Microsecond, 0, 1, 78},
		// 1.75 writes (2 at 20ms each): two.
		{"17.5ms a write", 15 * time.Millisecond, 0, 2, 97},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 3))
			lin := linear(tt.base, 2500*time.Microsecond)
			sim := simulate(t, 64, func(sent time.Time, inflight int) (time.Duration, bool) {
				l, _ := lin(sent, inflight)
				return time.Duration(float64(l) * (1 - tt.noise + 2*tt.noise*rng.Float64())), false
			})
			decisions := countDecisions(sim.p)
			sim.runAt(100, 5*time.Second)
			rate, inflight, most := sim.runAt(100, 20*time.Second)
			t.Logf("%.1f writes/s with %.2f in flight on average, %d at most; decisions %v", rate, inflight, most, decisions)
			if rate < tt.least || rate > 100.5 {
				t.Errorf("%.1f writes/s under a cap of 100, want %.0f to 100", rate, tt.least)
			}
			if most > tt.most {
				t.Errorf("%d writes in flight at most, want the %d the rate needs", most, tt.most)
			}
			if w := sim.p.window(); w != initialWindow || decisions[PacerGrow]+decisions[PacerKnee] > 0 {
				t.Errorf("window %d after decisions %v, want it held at %d: the cap, not the server, set the rate", w, decisions, initialWindow)
			}
			// What status shows: the rate measured, the cap, and the
			// writes in flight the cap allows.
			st := sim.p.state()
			if st.Rate < tt.least-3 || st.Rate > 105 || st.QPS != 100 || st.RateWindow != tt.most || st.Decision != PacerHold {
				t.Errorf("state %+v, want about 100 writes/s measured under a cap of 100 that allows %d in flight, after a hold", st, tt.most)
			}
		})
	}
}

func TestPacerUnderARateCapAboveTheServerFindsTheKnee(t *testing.T) {
	// The same server under a cap it cannot reach: the window, not the
	// cap, holds the writes in flight, and the pacer finds the knee as
	// without a cap (TestPacerFindsTheKneeOfALinearServer).
	sim := simulate(t, 256, linear(5*time.Millisecond, 2500*time.Microsecond))
	sim.runAt(2000, 10*time.Second)
	rate, inflight, _ := sim.runAt(2000, 20*time.Second)
	t.Logf("%.0f writes/s with %.1f in flight on average", rate, inflight)
	if rate < 0.85*400 {
		t.Errorf("%.0f writes/s, want at least 0.85 of the server's 400", rate)
	}
	if inflight > 40 {
		t.Errorf("%.1f writes in flight on average, want about the knee's 18, not the configured 256", inflight)
	}
	if st := sim.p.state(); st.RateWindow <= st.Window || st.Rate < 0.8*400 {
		t.Errorf("state %+v, want the cap to allow more writes in flight than the window, at about the server's 400 writes/s", st)
	}
}

func TestPacerUnderARateCapOnASingleSeatServer(t *testing.T) {
	// One write at a time, 10ms each, under a cap of half its rate: one
	// write in flight does it, and a second would only wait in the seat.
	var free time.Time
	sim := simulate(t, 64, func(sent time.Time, _ int) (time.Duration, bool) {
		start := sent
		if free.After(start) {
			start = free
		}
		free = start.Add(10 * time.Millisecond)
		return free.Sub(sent), false
	})
	rate, inflight, most := sim.runAt(50, 10*time.Second)
	t.Logf("%.1f writes/s with %.2f in flight on average, %d at most", rate, inflight, most)
	if rate < 49 || most > 1 {
		t.Errorf("%.1f writes/s with %d in flight at most, want 50 with one", rate, most)
	}
}

func TestPacerWaitsForTheRateWithItsPlaceTaken(t *testing.T) {
	// A write waiting for the rate limiter holds its place in the window
	// but is not at the server: the writes in flight a ticket counts are
	// those sent. Each write's turn comes when its context's channel says.
	type turnKey struct{}
	clock := &fakeClock{t: time.Unix(0, 0)}
	p := newPacer(4, clock.now)
	p.wait = func(ctx context.Context) error {
		select {
		case <-ctx.Value(turnKey{}).(chan struct{}):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	type sent struct {
		tk  ticket
		err error
	}
	send := func(ctx context.Context) (turn chan struct{}, done chan sent) {
		turn, done = make(chan struct{}), make(chan sent, 1)
		go func() {
			tk, err := p.acquire(context.WithValue(ctx, turnKey{}, turn))
			done <- sent{tk, err}
		}()
		return turn, done
	}
	turn, done := send(context.Background())
	close(turn)
	if s := <-done; s.err != nil || s.tk.inflight != 1 {
		t.Errorf("first write sent with %d in flight (%v), want 1", s.tk.inflight, s.err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	_, cancelled := send(ctx)
	turn, done = send(context.Background())
	for waitingFor(p) != 2 {
		time.Sleep(time.Millisecond)
	}
	close(turn)
	second := <-done
	cancel()
	if s := <-cancelled; s.err == nil {
		t.Error("a write cancelled while it waited for the rate was sent")
	}
	// Sent beside the first, while another waited for its turn.
	if second.err != nil || second.tk.inflight != 2 {
		t.Errorf("second write sent with %d in flight (%v), want 2: the first, and itself", second.tk.inflight, second.err)
	}
	if st := p.state(); st.InFlight != 2 || waitingFor(p) != 0 {
		t.Errorf("%d writes in flight and %d waiting after the cancelled write gave its place up, want 2 and none", st.InFlight, waitingFor(p))
	}
}

// waitingFor is the number of places whose writes wait for the rate.
func waitingFor(p *pacer) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waiting
}
