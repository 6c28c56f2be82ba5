package migrator

import (
	"context"
	"sync"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// answer sends and answers one write.
func answer(t *testing.T, p *pacer, latency time.Duration, throttled bool) {
	t.Helper()
	if err := p.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	p.release(latency, throttled)
}

func TestPacerFullSpeedOnAHealthyServer(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	p := newPacer(32, clock.now)
	for range 1000 {
		// Latency varies, as on any server, but stays well within bounds.
		answer(t, p, 5*time.Millisecond, false)
		answer(t, p, 15*time.Millisecond, false)
		clock.advance(time.Millisecond)
	}
	if w := p.window(); w != 32 {
		t.Errorf("window %d on a healthy server, want the configured 32", w)
	}
}

func TestPacerHalvesOnCongestionAndRecoversAdditively(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	p := newPacer(32, clock.now)
	for range 20 {
		answer(t, p, 10*time.Millisecond, false)
	}

	// One slow answer among fast ones is noise, not a queue.
	answer(t, p, 500*time.Millisecond, false)
	for range 5 {
		answer(t, p, 10*time.Millisecond, false)
	}
	if w := p.window(); w != 32 {
		t.Fatalf("window %d after one slow answer among fast ones, want still 32", w)
	}
	// A queue builds up: answers keep coming slow, and within a few the
	// window halves.
	slow := 0
	for p.window() == 32 && slow < 10 {
		answer(t, p, 500*time.Millisecond, false)
		slow++
	}
	if w := p.window(); w != 16 || slow > 3 {
		t.Fatalf("window %d after %d slow answers in a row, want 16 within 3", w, slow)
	}
	// The writes that were in flight saw the same queue: no second cut
	// within that answer's latency.
	clock.advance(100 * time.Millisecond)
	answer(t, p, 500*time.Millisecond, false)
	if w := p.window(); w != 16 {
		t.Fatalf("window %d after a second answer from the same queue, want still 16", w)
	}
	// Still congested later: halved again.
	clock.advance(time.Second)
	answer(t, p, 500*time.Millisecond, false)
	if w := p.window(); w != 8 {
		t.Fatalf("window %d after congestion persisted, want 8", w)
	}
	// A 429 is congestion whatever its latency.
	clock.advance(time.Second)
	answer(t, p, time.Millisecond, true)
	if w := p.window(); w != 4 {
		t.Fatalf("window %d after a 429, want 4", w)
	}
	// Nothing grows while the smoothed latency still shows the queue.
	for p.smoothed > minCongestedLatency {
		answer(t, p, 10*time.Millisecond, false)
		if w := p.window(); w != 4 {
			t.Fatalf("window %d while the smoothed latency is %s, want still 4", w, p.smoothed)
		}
	}
	// Recovery is additive: about one write more per window of answers.
	answers := 0
	for p.window() < 8 {
		answer(t, p, 10*time.Millisecond, false)
		answers++
	}
	if answers < 4+5+6+7-2 || answers > 4+5+6+7+2 {
		t.Errorf("%d answers to grow from 4 to 8, want about 4+5+6+7", answers)
	}
	for range 10000 {
		answer(t, p, 10*time.Millisecond, false)
	}
	if w := p.window(); w != 32 {
		t.Errorf("window %d after a long calm, want back to 32", w)
	}
}

func TestPacerNeverBelowOne(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	p := newPacer(4, clock.now)
	for range 20 {
		clock.advance(time.Minute)
		answer(t, p, time.Millisecond, true)
	}
	if w := p.window(); w != 1 {
		t.Errorf("window %d, want 1: a migration always makes progress", w)
	}
}

func TestPacerBoundsWritesInFlight(t *testing.T) {
	clock := &fakeClock{t: time.Unix(0, 0)}
	p := newPacer(8, clock.now)
	answer(t, p, 10*time.Millisecond, false)
	answer(t, p, time.Second, false) // halved to 4
	var mu sync.Mutex
	inflight, peak := 0, 0
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			if err := p.acquire(context.Background()); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			inflight++
			peak = max(peak, inflight)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			inflight--
			mu.Unlock()
			p.release(10*time.Millisecond, false)
		})
	}
	wg.Wait()
	if peak > 8 || peak < 2 {
		t.Errorf("peak %d writes in flight, want between 2 and the configured 8", peak)
	}
}

func TestPacerAcquireHonoursCancellation(t *testing.T) {
	p := newPacer(1, time.Now)
	if err := p.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := p.acquire(ctx); err == nil {
		t.Error("acquire returned without room and without its context ending")
	}
}
