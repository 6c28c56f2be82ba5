package migrator

import (
	"math"

	"golang.org/x/time/rate"
)

// DefaultBurst is the requests a limiter lets through at once by default:
// one. A token bucket that holds a second's worth of requests sends them
// in bursts whenever svm was held up (a list, a slow answer, the end of a
// chunk), and another client's requests wait behind the burst: at the
// same rate, an even pace costs them less (docs/benchmarks.md, "The price
// at one rate").
const DefaultBurst = 1

// NewLimiter is the limiter of qps requests per second that every command
// and pkg/migrate build for a qps cap, or nil for none (qps 0): burst
// requests at once at most, DefaultBurst when burst is 0.
func NewLimiter(qps float64, burst int) *rate.Limiter {
	if qps <= 0 {
		return nil
	}
	if burst <= 0 {
		burst = DefaultBurst
	}
	return rate.NewLimiter(rate.Limit(qps), burst)
}

// minRateChunk is the fewest objects a list brings under a rate cap: at a
// few writes per second, a list per write would double the requests.
const minRateChunk = 10

// chunkAtRate is the most objects a list brings under limiter l: about a
// second's writes at its rate (minRateChunk at least), within chunk. The
// writes a list feeds reach the server one by one, at the rate; the list
// brings all its objects at once. Under a cap, which an operator sets to
// be gentle, a list of a second's writes is no heavier a moment for the
// server than the second of writes it feeds.
func chunkAtRate(chunk int64, l *rate.Limiter) int64 {
	if !capped(l) {
		return chunk
	}
	return min(chunk, max(minRateChunk, int64(math.Ceil(float64(l.Limit())))))
}

// capped says whether l holds requests to a rate.
func capped(l *rate.Limiter) bool { return l != nil && l.Limit() != rate.Inf }
