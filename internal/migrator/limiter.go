package migrator

import "golang.org/x/time/rate"

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
