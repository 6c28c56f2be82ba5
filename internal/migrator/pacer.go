package migrator

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"
)

// pacer decides how many writes a migration has in flight: as many as take
// the API server to the knee of its curve, and no more.
//
// A server answers n writes in flight at a rate X(n) = n / L(n) (Little's
// law), where L(n) is their latency. X grows with n while the server has
// room, then levels off at its ceiling: past that point every added write
// only waits, adding its whole latency to everyone's answers, the other
// clients' included, and buying no rate. The knee is the fewest writes in
// flight that get kneeFraction of the best rate measured; the pacer keeps
// the window a little above it (kneeMargin).
//
// The pacer measures the curve instead of assuming its shape. Time is cut
// into epochs of a few round trips (and at least minEpoch), one per
// decision; each gives one point: the mean writes in flight when its
// writes were sent, and the rate their latency gives by Little's law
// (writes sent before the decision saw another window and are left out).
// From the last modelEpochs points:
//
//   - grow: when only about the most writes tried get the best rate, the
//     knee may lie beyond them, and the window grows by half, up to the
//     configured workers (there it probes a little lower every other
//     epoch, so that the points spread);
//   - knee: otherwise the window is set above the knee (kneeMargin and
//     probeSpread), and every other epoch a little below it
//     (probeSpread), so that the points keep spreading along the curve
//     and the knee follows a server that changes, down as well as up.
//     When the fewest writes tried already get the best rate, the probe
//     below looks further down (edgeProbe), as growth looks further up.
//
// No decision moves the window by more than half: one noisy epoch must not
// swing it far.
//
// Two signals override the curve, whatever the epoch: a 429 (API Priority
// and Fairness rejecting, or a server's max-inflight limit), at once, and
// a surge: two epochs in a row at or past the knee whose rate is under
// 1/surgeFactor of the knee's rate, the mean of the points from the knee
// on (someone else's load arrived, or the server slowed down). One such
// epoch alone is a stall that every client waits out alike (a garbage
// collection, a slow disk write), and is left out of the points. A
// slowdown, slowdownEpochs at or past the knee under slowdownFraction of
// the knee's rate with none at that fraction or faster between them, is a
// surge too: a server already slow that saturates at fewer writes loses
// less than half its rate, and the points of the faster server would
// hold the knee where it was until they aged out. Both compare with the
// knee's mean rate, not the best: on a noisy machine the best of a dozen
// points is inflated by the noise, and noise alone then read as a
// slowdown cut the window of an idle server again and again.
// Either halves the window, at most once per smoothed latency since the
// writes already in flight saw the same queue, and a surge also forgets
// the points, so that the busier server is learnt from scratch: its first
// points are looked for below the halved window (edgeProbe), where a
// server whose ceiling fell most likely has its knee now. Its mirror, a
// relief (an epoch faster than surgeFactor times the best), forgets the
// points too, and the window grows from where it is: the load that held
// it down has left.
//
// A write that fails without an answer (a 5xx, a reset connection, a
// timeout) says nothing about the curve but that the server is unwell:
// the window drops to one write. A write that failed or was throttled
// keeps its place in the window through its backoff and retry, as long as
// the window has room for it; the others wait for room. However many
// workers hold an object, an outage then costs the retries of the writes
// the window holds (one, once it has dropped), each on its own backoff,
// not a retry chain per worker.
//
// Under a rate cap (--qps), the writes in flight are also held to what
// the rate needs at the smoothed latency (rateWindow): by Little's law
// qps times the latency, to the nearest whole write. A write waits for the cap
// with its place in the window taken, so that one held up by a slow
// answer does not come back with the tokens of the time it waited: the
// server never gets more of svm's writes at once than the rate needs.
// An epoch that the cap held under the window measured the cap, not the
// server, whose curve is then flat by construction (the same rate at
// every writes in flight): its point is left out and the window holds.
type pacer struct {
	max float64
	now func() time.Time
	// observe, if set, is told every decision.
	observe func(PacerState)
	// qps is the rate cap the writes are sent under, 0 for none; wait,
	// if set, is waited for before a write is sent, its place in the
	// window taken: the Migrator's shared places and the rate limiter
	// (run.capWrites).
	qps  float64
	wait func(context.Context) error

	mu       sync.Mutex
	limit    float64
	inflight int
	// waiting counts the places in the window whose writes wait for the
	// rate limiter: taken, but not at the server yet.
	waiting int
	// waiters are the writes waiting for room, longest waiting first:
	// room is handed to one at a time, so that a freed place wakes one
	// worker, not all of them.
	waiters []chan ticket
	// smoothed is the average latency, recent answers weighing most, as
	// TCP smooths its round-trip time.
	smoothed time.Duration
	// calmUntil is when the window may be cut again.
	calmUntil time.Time

	epoch   epoch
	samples []curvePoint
	// above alternates the probes above and below the knee.
	above bool
	// knee is the knee at the last decision, 0 while the points show
	// none.
	knee float64
	// relearning is set by a surge, until three points are measured
	// again.
	relearning bool
	// stalled is set by an epoch that looked like a surge: the next one
	// decides whether it was one.
	stalled bool
	// slow counts the epochs at or past the knee under slowdownFraction
	// of the knee's rate since the last one that was not that slow.
	slow int
	last PacerDecision
	// rate is the writes answered per second over the last epoch.
	rate float64
}

// epoch accumulates the answers to writes sent since the last decision:
// writes sent before it saw another window.
type epoch struct {
	start time.Time
	// generation numbers the epochs; a ticket carries its send's.
	generation int
	answers    int
	// done counts every write answered in the epoch, whenever it was
	// sent: the rate.
	done int
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

// curvePoint is one epoch's mean writes in flight and the rate, in writes
// per second, their mean latency gives.
type curvePoint struct{ inflight, rate float64 }

// curveKnee is what the points show: the best rate, the fewest writes in
// flight that got kneeFraction of it, the fewest and most writes tried,
// and the knee's rate: the mean rate of the points from the knee on,
// what the server gives at the knee as the noise averages out.
type curveKnee struct{ best, knee, least, most, kneeRate float64 }

// kneeOf reads the knee from the points. Each point's rate is read as the
// mean of the rates measured at about its writes in flight (within
// sameWindow), not alone: the window returns to the same few values
// (the probes above and below the knee), and the best of a dozen noisy
// epochs is mostly noise. On a machine whose speed drifts, the mean kept
// 4 to 8% more of the rate in simulation (docs/design.md#pacing).
func kneeOf(points []curvePoint) curveKnee {
	k := curveKnee{least: math.Inf(1)}
	smoothed := make([]float64, len(points))
	for i, pt := range points {
		sum, n := 0.0, 0
		for _, other := range points {
			if math.Abs(math.Log(other.inflight/pt.inflight)) <= sameWindow {
				sum += other.rate
				n++
			}
		}
		smoothed[i] = sum / float64(n)
		k.best = max(k.best, smoothed[i])
		k.least = min(k.least, pt.inflight)
		k.most = max(k.most, pt.inflight)
	}
	k.knee = k.most
	for i, pt := range points {
		if smoothed[i] >= kneeFraction*k.best {
			k.knee = min(k.knee, pt.inflight)
		}
	}
	sum, n := 0.0, 0
	for _, pt := range points {
		if pt.inflight >= k.knee {
			sum += pt.rate
			n++
		}
	}
	k.kneeRate = sum / float64(n)
	return k
}

// PacerDecision is what the pacer did with the window.
type PacerDecision string

const (
	// PacerGrow: only about the most writes tried get the best rate, so
	// the knee may lie beyond them, or a relief forgot the points; the
	// window grows by half.
	PacerGrow PacerDecision = "grow"
	// PacerKnee: the window was set around the knee of the measured
	// rate curve.
	PacerKnee PacerDecision = "knee"
	// PacerBackOff: a 429 or a surge halved the window, or a failed write
	// dropped it to one.
	PacerBackOff PacerDecision = "back-off"
	// PacerHold: the rate cap held the writes in flight under the window,
	// and the epoch measured the cap, not the server; the window holds.
	PacerHold PacerDecision = "hold"
)

// PacerState is the pacer's state after a decision, for metrics and
// status.
type PacerState struct {
	// Window is the number of writes now allowed in flight.
	Window int
	// InFlight is the number of writes in flight: sent, not answered.
	InFlight int
	// SmoothedLatency is the recent average time a write took.
	SmoothedLatency time.Duration
	// Knee is the fewest writes in flight that got 0.95 of the best rate
	// measured (at the last decision); 0 while only the most writes tried
	// get it.
	Knee float64
	// Decision is the last decision.
	Decision PacerDecision
	// Rate is the writes answered per second over the last epoch.
	Rate float64
	// QPS is the rate cap the writes are sent under, 0 for none.
	QPS float64
	// RateWindow is the most writes in flight the rate cap allows at the
	// smoothed latency (QPS times it, to the nearest whole write); 0
	// without a cap. No more are in flight than both it and Window allow.
	RateWindow int
}

const (
	// kneeFraction is the share of the best rate that marks the knee, and
	// kneeMargin how far above it the window is kept: the fewest writes in
	// flight that get 0.95 of the best rate measured, with a margin above,
	// at the lowest latency that gets it.
	kneeFraction = 0.95
	kneeMargin   = 1.3
	// modelEpochs is how many epochs the knee is read from: a few
	// seconds, so that it follows a server that changes.
	modelEpochs = 12
	// minEpoch is the shortest epoch: shorter ones see the noise of single
	// answers and garbage collections, not the curve.
	minEpoch = 500 * time.Millisecond
	// probeSpread sets how far above and below the knee the window
	// probes: enough for the points to spread, little enough to stay near
	// the knee.
	probeSpread = 0.1
	// edgeProbe is where the window probes below a knee at the fewest
	// writes tried, as a share of it.
	edgeProbe = 0.5
	// surgeFactor is how much below the knee's rate an epoch at or past
	// the knee must fall for the pacer to back off at once.
	surgeFactor = 2
	// sameWindow is how far apart, in log writes in flight, two points
	// may be and still be read as measures of the same point of the
	// curve: a tenth.
	sameWindow = 0.1
	// slowdownFraction and slowdownEpochs: that many epochs at or past
	// the knee under slowdownFraction of the knee's rate, with none at
	// that fraction or faster between them, are a slowdown, as a surge
	// is.
	slowdownFraction = 0.8
	slowdownEpochs   = 3
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
		epoch: epoch{start: now()},
	}
}

// acquire waits until a write may be sent: for room in the window, then
// for the rate limiter (see pacer); release takes the ticket back.
func (p *pacer) acquire(ctx context.Context) (ticket, error) {
	t, err := p.admit(ctx)
	if err != nil || p.wait == nil {
		return t, err
	}
	if t, err = p.paced(ctx); err != nil {
		p.drop()
	}
	return t, err
}

// resend waits for the rate limiter before the retry of t, a write that
// kept its place in the window (see release), and returns the retry's
// ticket: t when there is no limiter.
func (p *pacer) resend(ctx context.Context, t ticket) (ticket, error) {
	if p.wait == nil {
		return t, nil
	}
	return p.paced(ctx)
}

// paced waits for the rate limiter with a place in the window taken, and
// returns the ticket of the write then sent.
func (p *pacer) paced(ctx context.Context) (ticket, error) {
	p.mu.Lock()
	p.waiting++
	p.mu.Unlock()
	err := p.wait(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.waiting--
	if err != nil {
		return ticket{}, err
	}
	return ticket{inflight: p.inflight - p.waiting, generation: p.epoch.generation}, nil
}

// admit waits for room in the window and takes a place in it.
func (p *pacer) admit(ctx context.Context) (ticket, error) {
	p.mu.Lock()
	if len(p.waiters) == 0 && p.inflight < p.roomLocked() {
		t := p.admitLocked()
		p.mu.Unlock()
		return t, nil
	}
	admitted := make(chan ticket, 1)
	p.waiters = append(p.waiters, admitted)
	p.mu.Unlock()
	select {
	case t := <-admitted:
		return t, nil
	case <-ctx.Done():
	}
	p.mu.Lock()
	if i := slices.Index(p.waiters, admitted); i >= 0 {
		p.waiters = slices.Delete(p.waiters, i, i+1)
		p.mu.Unlock()
		return ticket{}, ctx.Err()
	}
	p.mu.Unlock()
	// Admitted as the context ended: the place goes to the next.
	<-admitted
	p.drop()
	return ticket{}, ctx.Err()
}

// admitLocked takes a place in the window.
func (p *pacer) admitLocked() ticket {
	p.inflight++
	return ticket{inflight: p.inflight, generation: p.epoch.generation}
}

// roomLocked is the most writes that may be in flight now: the window,
// and under a rate cap no more than the rate needs.
func (p *pacer) roomLocked() int {
	if p.qps <= 0 {
		return int(p.limit)
	}
	return min(int(p.limit), p.rateWindowLocked())
}

// rateWindowLocked is the writes in flight the rate cap needs now: one
// before any answer has been measured.
func (p *pacer) rateWindowLocked() int {
	if p.smoothed == 0 {
		return 1
	}
	return rateWindow(p.qps, p.smoothed, p.max)
}

// rateWindow is the writes in flight that qps writes per second need when
// each takes latency: qps times latency (Little's law), rounded to the
// nearest whole write, from one to most. Never rounded up: a window a
// write above the mean is used only when an answer is slow, which is when
// the server is busiest, and its second write then waits at the server
// beside the first, ahead of other clients' requests. So svm keeps one
// write at a time where the rate needs about one, as the in-tree migrator
// writes, and slow answers cost rate instead: at worst a third of the cap
// (when the rate needs just under one and a half writes). Measured alone,
// this rounding did not move the benchmark's other client's p99 beyond
// the noise of five rounds; the lists sent beside the writes did
// (docs/benchmarks.md, "The price at one rate", and listAndRewrite).
func rateWindow(qps float64, latency time.Duration, most float64) int {
	return int(min(most, max(1, math.Round(qps*latency.Seconds()))))
}

// wakeLocked hands the room in the window to the writes waiting longest.
func (p *pacer) wakeLocked() {
	for len(p.waiters) > 0 && p.inflight < p.roomLocked() {
		next := p.waiters[0]
		p.waiters = p.waiters[1:]
		next <- p.admitLocked()
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
			p.wakeLocked()
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
		return p.inflight <= p.roomLocked()
	}
	p.epoch.done++
	if t.generation == p.epoch.generation {
		p.epoch.answers++
		p.epoch.inflight += t.inflight
		p.epoch.latency += latency
	}
	switch {
	case o == throttled:
		p.backOff(now, latency, false)
		return p.inflight <= p.roomLocked()
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
	p.wakeLocked()
}

// newEpoch starts an epoch at now.
func (p *pacer) newEpoch(now time.Time) {
	p.epoch = epoch{start: now, generation: p.epoch.generation + 1}
}

// endEpoch turns the epoch into a point of the curve and decides the
// window from the curve.
func (p *pacer) endEpoch(now time.Time, latency time.Duration) {
	answers := float64(p.epoch.answers)
	inflight := float64(p.epoch.inflight) / answers
	point := curvePoint{inflight: inflight, rate: inflight / (p.epoch.latency.Seconds() / answers)}
	p.rate = float64(p.epoch.done) / now.Sub(p.epoch.start).Seconds()
	p.newEpoch(now)
	if p.qps > 0 && p.rateWindowLocked() <= int(p.limit) {
		// The cap set the rate, at every writes in flight alike: the
		// point would read as a knee at the fewest writes tried, and
		// pull the window under what the cap needs.
		p.decide(PacerHold, p.limit)
		return
	}
	if p.overridden(now, latency, point) {
		return
	}
	p.samples = append(p.samples, point)
	if len(p.samples) > modelEpochs {
		p.samples = p.samples[1:]
	}
	k := kneeOf(p.samples)
	if p.relearning {
		if len(p.samples) < 3 {
			// After a surge the server's ceiling is lower, and so, unless
			// it only slowed down, is its knee: the first points are
			// looked for below the halved window, which also leaves the
			// room the surge asked for.
			p.decide(PacerKnee, edgeProbe*p.limit)
			return
		}
		p.relearning = false
	}
	if len(p.samples) < 3 || k.knee >= 0.8*k.most {
		p.knee = 0
		target := p.limit + maxStep(p.limit)
		if p.limit >= p.max {
			// At the most it may grow, the window would stay where it is
			// and the points would not spread: every other epoch it
			// probes a little lower.
			p.above = !p.above
			if !p.above {
				target = p.max * (1 - 2*probeSpread)
			}
		}
		p.decide(PacerGrow, target)
		return
	}
	p.knee = k.knee
	// Every other epoch probes below the knee, where the rate would tell
	// that the knee lies lower, and the others keep the margin above it.
	target := (kneeMargin + probeSpread) * k.knee
	p.above = !p.above
	if !p.above {
		target = (1 - probeSpread) * k.knee
		if k.knee <= k.least {
			// The fewest writes tried already get the best rate: nothing
			// says the knee is not far below them (a server saturated at
			// fewer writes than the window had when it changed), so the
			// probe looks further down, as growth looks further up.
			target = edgeProbe * k.knee
		}
	}
	// One epoch's noise must not swing the window far: at most halved or
	// grown by half (and one) per decision.
	target = min(max(target, p.limit/2), p.limit+maxStep(p.limit))
	p.decide(PacerKnee, target)
}

// overridden looks at point, the epoch just ended, against the curve
// before it: a second slow epoch in a row is a surge, and backs off; a
// relief forgets the points. It tells whether the epoch is done with (a
// surge, or a stall left out of the points).
func (p *pacer) overridden(now time.Time, latency time.Duration, point curvePoint) bool {
	if len(p.samples) < 3 {
		p.stalled, p.slow = false, 0
		return false
	}
	k := kneeOf(p.samples)
	// An epoch at the knee's rate, whatever its window, ends a row of
	// slow ones: a server that slowed down is slow at every window. One
	// below the knee that is slower says nothing, since the curve is
	// lower there.
	switch {
	case point.rate >= slowdownFraction*k.kneeRate:
		p.slow = 0
	case point.inflight >= k.knee:
		p.slow++
	}
	if p.slow >= slowdownEpochs {
		// A slowdown: the server no longer gets the rate the points
		// promise at the knee, though never half as slow as a surge
		// (another client's load, or a server saturated at fewer writes
		// than the knee). The points describe a server that is gone, and
		// would hold the knee where it was until they aged out, a dozen
		// epochs: the busier server is learnt from scratch, as after a
		// surge.
		p.slow, p.stalled = 0, false
		p.backOff(now, latency, true)
		return true
	}
	if point.inflight >= k.knee && point.rate < k.kneeRate/surgeFactor {
		if p.stalled {
			p.stalled = false
			p.backOff(now, latency, true)
			return true
		}
		// One slow epoch may be a stall that every client waits out
		// alike (a garbage collection, a slow disk write, a noisy
		// neighbour): backing off for it would cost the rate long after
		// it is over. The point describes the stall, not the curve, and
		// is not kept; a second in a row is a surge.
		p.stalled = true
		return true
	}
	p.stalled = false
	if point.rate > surgeFactor*k.best {
		// Relief, a surge's mirror: more than twice the best rate
		// measured. The server the points describe is gone (another
		// client's load left, or the server has room again), and they
		// would hold the window where it was until they aged out:
		// forgotten, the window grows from here.
		p.samples, p.relearning, p.slow = nil, false, 0
	}
	return false
}

// maxStep is the most the window grows in one decision: by half, and by
// one at least.
func maxStep(limit float64) float64 { return max(1, limit/2) }

// backOff halves the window, at most once per smoothed latency; a surge
// also forgets the model, fitted to a server that is no longer there.
func (p *pacer) backOff(now time.Time, latency time.Duration, surge bool) {
	if now.Before(p.calmUntil) {
		// The same congestion, seen by another write already in flight.
		return
	}
	p.calmUntil = now.Add(max(latency, p.smoothed))
	if surge {
		p.samples, p.knee, p.relearning, p.slow = nil, 0, true, 0
	}
	p.newEpoch(now)
	p.decide(PacerBackOff, math.Floor(p.limit/2))
}

func (p *pacer) decide(d PacerDecision, limit float64) {
	p.limit = min(p.max, max(1, limit))
	p.wakeLocked()
	p.last = d
	if p.observe != nil {
		p.observe(p.stateLocked())
	}
}

// room is the most writes that may be in flight now (see roomLocked).
func (p *pacer) room() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.roomLocked()
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
		Window: int(p.limit), InFlight: p.inflight - p.waiting, SmoothedLatency: p.smoothed, Knee: p.knee, Decision: p.last,
		Rate: p.rate, QPS: p.qps,
	}
	if p.qps > 0 {
		s.RateWindow = p.rateWindowLocked()
	}
	return s
}
