package migrator

import (
	"context"
	"math"
	"sync"
	"time"
)

// pacer adapts how many writes a migration has in flight to what the API
// server can take, the way TCP adapts its window: additive increase,
// multiplicative decrease (AIMD).
//
// The signal is latency. A server that is keeping up answers an empty
// patch in about the same time however many arrive; one that is not
// queues them (API Priority and Fairness queues by design), and their
// latency climbs. Throttling shows up the same way: client-go sleeps for
// a 429's Retry-After inside the request, and a 429 that outlives its
// retries arrives as one.
//
// Single answers are noisy: a garbage collection or a busy etcd makes a
// few slow without anything queueing. So the latency is smoothed as TCP
// smooths its round-trip time (an exponentially weighted average, each
// answer weighing 1/smoothing), and when the smoothed latency exceeds
// congestionFactor times the fastest answer seen recently (and
// minCongestedLatency, below which no server is in trouble), or an answer
// is a 429, the window halves, at most once per smoothed latency, since
// the writes already in flight saw the same queue; every other answer
// grows it by one write per window's worth of answers, up to the
// configured workers. A migration thus runs at full speed on an idle
// server and backs off within a few round trips when the server, or
// anyone else's load on it, needs the room.
type pacer struct {
	max float64
	now func() time.Time

	mu       sync.Mutex
	limit    float64
	inflight int
	freed    chan struct{} // closed and replaced whenever room may have appeared
	// fastest is the lowest latency seen, rising slowly so that a server
	// that became slower for good (bigger objects, other load) resets it.
	fastest time.Duration
	// smoothed is the average latency, recent answers weighing most.
	smoothed time.Duration
	// calmUntil is when the window may be cut again.
	calmUntil time.Time
}

const (
	congestionFactor    = 4
	minCongestedLatency = 100 * time.Millisecond
	// fastestDrift is the share of the gap by which the fastest latency
	// moves toward every slower answer: it forgets a fast outlier after a
	// few thousand answers.
	fastestDrift = 1.0 / 2048
	// smoothing is how many answers the smoothed latency roughly
	// averages, TCP's 8: one slow answer among fast ones moves it by an
	// eighth of the difference.
	smoothing = 8
)

func newPacer(maxInFlight int, now func() time.Time) *pacer {
	return &pacer{max: float64(maxInFlight), limit: float64(maxInFlight), now: now, freed: make(chan struct{})}
}

// acquire waits until a write may be sent.
func (p *pacer) acquire(ctx context.Context) error {
	for {
		p.mu.Lock()
		if p.inflight < int(p.limit) {
			p.inflight++
			p.mu.Unlock()
			return nil
		}
		freed := p.freed
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-freed:
		}
	}
}

// release ends a write that took latency; throttled tells a 429.
func (p *pacer) release(latency time.Duration, throttled bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inflight--
	switch {
	case p.fastest == 0 || latency < p.fastest:
		p.fastest = latency
	default:
		p.fastest += time.Duration(float64(latency-p.fastest) * fastestDrift)
	}
	if p.smoothed == 0 {
		p.smoothed = latency
	} else {
		p.smoothed += (latency - p.smoothed) / smoothing
	}
	congested := throttled || p.smoothed > max(congestionFactor*p.fastest, minCongestedLatency)
	now := p.now()
	switch {
	case congested && now.Before(p.calmUntil):
		// The same congestion, seen by another write already in flight.
	case congested:
		p.limit = max(1, math.Floor(p.limit/2))
		p.calmUntil = now.Add(max(latency, p.smoothed))
	default:
		p.limit = min(p.max, p.limit+1/p.limit)
	}
	close(p.freed)
	p.freed = make(chan struct{})
}

// window is the current number of writes allowed in flight.
func (p *pacer) window() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return int(p.limit)
}
