package migrator

import (
	"context"
	"math"
	"sync"
	"time"
)

// pacer decides how many writes a migration has in flight: as many as take
// the API server to the knee of its latency curve, and no more.
//
// A server answers n writes in flight at a rate X(n) = n / L(n) (Little's
// law), where L(n) is their latency. Past the point where it is busy,
// latency grows in a straight line with what is queued: L(n) = a + b·n,
// where a is the time a write takes on its own and 1/b is the rate the
// server cannot exceed however many writes wait. Its rate is then
// X(n) = n / (a + b·n), which reaches a fraction f of 1/b at
// n = f/(1-f) · a/b. That is the knee the pacer aims for, with f =
// kneeFraction: nine tenths of the server's ceiling at the lowest latency
// that gets it. Beyond it, every added write buys almost no rate and adds
// its whole latency to everyone's answers, the other clients' included.
//
// The pacer measures the curve instead of assuming it. Time is cut into
// epochs of a few round trips, one per decision; each gives one point: the
// mean writes in flight when its writes were sent, and their mean latency
// (writes sent before the decision saw another window and are left out), and the last modelEpochs points are fitted
// with a straight line. The window alternates a little above and below
// the knee it predicts (probeSpread), so that the points spread along the
// curve and the fit stays true as the server changes. Where latency does
// not grow with the window, the server is not busy, and the window grows
// by half each epoch, up to the configured workers.
//
// Two signals override the model at once, whatever the epoch: a 429 (API
// Priority and Fairness rejecting, or a server's max-inflight limit), and
// an epoch whose latency is more than surgeFactor times what the model
// predicted (someone else's load arrived). Either halves the window, at
// most once per smoothed latency since the writes already in flight saw
// the same queue, and a surge also forgets the model, which then learns
// the busier server from scratch.
//
// A write that fails without an answer (a 5xx, a reset connection, a
// timeout) says nothing about the curve but that the server is unwell:
// the window drops to one write. A write that failed or was throttled
// keeps its place in the window through its backoff and retry, as long as
// the window has room for it; the others wait for room. However many
// workers hold an object, an outage then costs the retries of the writes
// the window holds (one, once it has dropped), each on its own backoff,
// not a retry chain per worker.
type pacer struct {
	max float64
	now func() time.Time
	// observe, if set, is told every decision.
	observe func(PacerState)

	mu       sync.Mutex
	limit    float64
	inflight int
	freed    chan struct{} // closed and replaced whenever room may have appeared
	// smoothed is the average latency, recent answers weighing most, as
	// TCP smooths its round-trip time.
	smoothed time.Duration
	// calmUntil is when the window may be cut again.
	calmUntil time.Time

	epoch   epoch
	samples []curvePoint
	// above alternates the probe above and below the knee.
	above bool
	// model is the last fit, valid when model.slope > 0.
	model     curveFit
	decisions [decisionKinds]int64
	last      PacerDecision
}

// epoch accumulates the answers to writes sent since the last decision:
// writes sent before it saw another window.
type epoch struct {
	start time.Time
	// generation numbers the epochs; a ticket carries its send's.
	generation int
	answers    int
	// inflight sums the writes in flight at each answered write's send,
	// latency their latencies.
	inflight int
	latency  time.Duration
}

// ticket is a write sent: the writes in flight when it was sent (itself
// included), and in which epoch.
type ticket struct {
	inflight   int
	generation int
}

// curvePoint is one epoch's mean writes in flight and mean latency in
// seconds.
type curvePoint struct{ inflight, latency float64 }

// curveFit is latency = intercept + slope·inflight, in seconds.
type curveFit struct{ intercept, slope float64 }

func (f curveFit) valid() bool { return f.slope > 0 }

// knee is the window at which the fitted server runs at kneeFraction of
// its ceiling.
func (f curveFit) knee() float64 {
	return kneeFraction / (1 - kneeFraction) * max(f.intercept, 0) / f.slope
}

// PacerDecision is what the pacer did with the window.
type PacerDecision string

const (
	// PacerGrow: latency does not grow with the writes in flight, so the
	// server has room; the window grows by half.
	PacerGrow PacerDecision = "grow"
	// PacerKnee: the window was set around the knee of the measured
	// latency curve.
	PacerKnee PacerDecision = "knee"
	// PacerBackOff: a 429 or a surge of latency halved the window.
	PacerBackOff PacerDecision = "back-off"
)

// PacerDecisions lists every decision, for metrics that start at zero.
var PacerDecisions = []PacerDecision{PacerGrow, PacerKnee, PacerBackOff}

const decisionKinds = 3

func (d PacerDecision) index() int {
	switch d {
	case PacerGrow:
		return 0
	case PacerKnee:
		return 1
	default:
		return 2
	}
}

// PacerState is the pacer's state after a decision, for metrics and
// status.
type PacerState struct {
	// Window is the number of writes now allowed in flight.
	Window int
	// InFlight is the number of writes in flight.
	InFlight int
	// SmoothedLatency is the recent average time a write took.
	SmoothedLatency time.Duration
	// Knee is the window the latency curve measured so far points to; 0
	// while latency has not grown with the window.
	Knee float64
	// Decision is the last decision, Decisions how many of each were
	// made (indexed as PacerDecisions).
	Decision  PacerDecision
	Decisions map[PacerDecision]int64
}

const (
	// kneeFraction is the share of the server's ceiling the pacer aims
	// for: the last tenth would cost as much latency again as the nine
	// before it.
	kneeFraction = 0.9
	// modelEpochs is how many epochs the curve is fitted to: a few
	// seconds, so that the model follows a server that changes.
	modelEpochs = 8
	// minEpoch is the shortest epoch: shorter ones see the noise of single
	// answers, not the curve.
	minEpoch = 200 * time.Millisecond
	// probeSpread is how far above and below the knee the window probes.
	probeSpread = 0.2
	// surgeFactor is how much slower than predicted an epoch's answers
	// must be for the pacer to back off at once.
	surgeFactor = 2
	// smoothing is how many answers the smoothed latency roughly
	// averages, TCP's 8.
	smoothing = 8
	// initialWindow is the window before anything is measured.
	initialWindow = 8
)

// outcome is how a write ended, for the pacer.
type outcome int

const (
	// answered: the server answered (success, conflict, not found, a
	// denial): a point of the curve.
	answered outcome = iota
	// throttled: a 429.
	throttled
	// failed: no answer (a 5xx, a reset connection, a timeout).
	failed
)

func newPacer(maxInFlight int, now func() time.Time) *pacer {
	return &pacer{
		max: float64(maxInFlight), limit: min(float64(maxInFlight), initialWindow), now: now,
		freed: make(chan struct{}), epoch: epoch{start: now()},
	}
}

// acquire waits until a write may be sent; release takes the ticket back.
func (p *pacer) acquire(ctx context.Context) (ticket, error) {
	for {
		p.mu.Lock()
		if p.inflight < int(p.limit) {
			p.inflight++
			t := ticket{inflight: p.inflight, generation: p.epoch.generation}
			p.mu.Unlock()
			return t, nil
		}
		freed := p.freed
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return ticket{}, ctx.Err()
		case <-freed:
		}
	}
}

// release ends the write of t, which took latency and ended as o. For a
// write that failed or was throttled, it reports whether the write keeps
// its place in the window for its retry: while the window, cut for it, has
// room. The caller then sends the retry without acquire, and calls drop if
// it sends none.
func (p *pacer) release(t ticket, latency time.Duration, o outcome) (kept bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() {
		if !kept {
			p.inflight--
			close(p.freed)
			p.freed = make(chan struct{})
		}
	}()
	now := p.now()
	if p.smoothed == 0 {
		p.smoothed = latency
	} else {
		p.smoothed += (latency - p.smoothed) / smoothing
	}
	if o == failed {
		p.newEpoch(now)
		if p.limit > 1 {
			p.decide(PacerBackOff, 1)
		}
		return p.inflight <= int(p.limit)
	}
	if t.generation == p.epoch.generation {
		p.epoch.answers++
		p.epoch.inflight += t.inflight
		p.epoch.latency += latency
	}
	switch {
	case o == throttled:
		p.backOff(now, latency, false)
		return p.inflight <= int(p.limit)
	case p.epoch.answers >= max(2*int(p.limit), 4) && now.Sub(p.epoch.start) >= minEpoch:
		p.endEpoch(now, latency)
	}
	return false
}

// drop gives up a place kept by release for a retry that is not sent.
func (p *pacer) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inflight--
	close(p.freed)
	p.freed = make(chan struct{})
}

// newEpoch starts an epoch at now.
func (p *pacer) newEpoch(now time.Time) {
	p.epoch = epoch{start: now, generation: p.epoch.generation + 1}
}

// endEpoch turns the epoch into a point of the curve and decides the
// window from the curve.
func (p *pacer) endEpoch(now time.Time, latency time.Duration) {
	answers := float64(p.epoch.answers)
	point := curvePoint{inflight: float64(p.epoch.inflight) / answers, latency: p.epoch.latency.Seconds() / answers}
	p.newEpoch(now)
	if p.model.valid() && point.latency > surgeFactor*(p.model.intercept+p.model.slope*point.inflight) {
		p.backOff(now, latency, true)
		return
	}
	p.samples = append(p.samples, point)
	if len(p.samples) > modelEpochs {
		p.samples = p.samples[1:]
	}
	p.model = fit(p.samples)
	if !p.model.valid() {
		p.decide(PacerGrow, p.limit*1.5)
		return
	}
	target := p.model.knee()
	// A knee far beyond what was measured is an extrapolation: approach
	// it by doubling, measuring on the way.
	target = min(target, 2*max(point.inflight, 1))
	p.above = !p.above
	if p.above {
		target *= 1 + probeSpread
	} else {
		target *= 1 - probeSpread
	}
	p.decide(PacerKnee, target)
}

// backOff halves the window, at most once per smoothed latency; a surge
// also forgets the model, fitted to a server that is no longer there.
func (p *pacer) backOff(now time.Time, latency time.Duration, surge bool) {
	if now.Before(p.calmUntil) {
		// The same congestion, seen by another write already in flight.
		return
	}
	p.calmUntil = now.Add(max(latency, p.smoothed))
	if surge {
		p.samples, p.model = nil, curveFit{}
	}
	p.newEpoch(now)
	p.decide(PacerBackOff, math.Floor(p.limit/2))
}

func (p *pacer) decide(d PacerDecision, limit float64) {
	p.limit = min(p.max, max(1, limit))
	p.decisions[d.index()]++
	p.last = d
	if p.observe != nil {
		p.observe(p.stateLocked())
	}
}

// fit is the least-squares line through points; its slope is 0 when the
// points do not spread along the window or latency does not grow with it.
func fit(points []curvePoint) curveFit {
	if len(points) < 3 {
		return curveFit{}
	}
	var mx, my float64
	for _, pt := range points {
		mx += pt.inflight
		my += pt.latency
	}
	n := float64(len(points))
	mx, my = mx/n, my/n
	var sxx, sxy float64
	for _, pt := range points {
		sxx += (pt.inflight - mx) * (pt.inflight - mx)
		sxy += (pt.inflight - mx) * (pt.latency - my)
	}
	// Points within a tenth of a write of each other say nothing about
	// the slope.
	if sxx < 0.01*n {
		return curveFit{}
	}
	slope := sxy / sxx
	if slope <= 0 {
		return curveFit{}
	}
	return curveFit{intercept: my - slope*mx, slope: slope}
}

// window is the current number of writes allowed in flight.
func (p *pacer) window() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return int(p.limit)
}

// state is the pacer's state now.
func (p *pacer) state() PacerState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stateLocked()
}

func (p *pacer) stateLocked() PacerState {
	s := PacerState{
		Window: int(p.limit), InFlight: p.inflight, SmoothedLatency: p.smoothed, Decision: p.last,
		Decisions: make(map[PacerDecision]int64, decisionKinds),
	}
	if p.model.valid() {
		s.Knee = p.model.knee()
	}
	for _, d := range PacerDecisions {
		s.Decisions[d] = p.decisions[d.index()]
	}
	return s
}
