package kubeclients

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// SkewEnv names a test hook: a Go duration (SVM_CLOCK_SKEW=5m) by which
// this machine's clock is taken to be off, as a workstation 5 minutes fast
// would be. Go reads the time through the vDSO, which libfaketime cannot
// fake, so the integration tests move svm's local clock with this instead.
// It moves the local clock only, never what the API server's answers say:
// a ServerClock must come out the same with it or without. It is read once,
// when the process starts.
const SkewEnv = "SVM_CLOCK_SKEW"

var localSkew, localSkewErr = skewFrom(os.Getenv(SkewEnv))

func skewFrom(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s=%q: not a duration: %w", SkewEnv, v, err)
	}
	return d, nil
}

// localNow is this machine's clock, moved by SkewEnv.
func localNow() time.Time { return time.Now().Add(localSkew) }

// ServerClock is the API server's clock, as far as this process can tell:
// the Date of the latest answer of the API server's own, and the time
// passed on this machine since it came. svm compares the times the API
// server stamps (a CRD's managedFields, a migration's creationTimestamp,
// a lease's renewTime) with now, and a workstation whose clock is minutes
// fast would otherwise find a drain margin already passed, or a migration
// it just made older than the storage it was made for.
//
// Date has a second's precision, and the answer was stamped some time
// before it came: so the time read is never later than the server's, and
// at most a second and a round trip earlier. That is the side to err on:
// the waits svm measures against it (a drain margin, a settle delay, a
// retry) are tens of seconds to minutes, and come out that much longer,
// never shorter. Each answer replaces what the one before taught, so a
// clock stepped on either side is followed at the next answer; the time
// passed since is read on the monotonic clock, which no step moves.
//
// Before the first answer it is this machine's clock. It is a clock.Clock:
// timers and sleeps are durations, the same on either clock.
type ServerClock struct {
	clock.RealClock
	// local is this machine's clock (localNow).
	local func() time.Time
	// base is the path the configuration's host puts before /api and
	// /apis, "" for none.
	base string
	last atomic.Pointer[reading]
}

var _ clock.WithTickerAndDelayedExecution = (*ServerClock)(nil)

// reading is what one answer said of the server's clock.
type reading struct {
	// date is the answer's Date: the server's time when it answered, to
	// the second below.
	date time.Time
	// received is the local time (with its monotonic reading) when the
	// answer came.
	received time.Time
}

// newServerClock is the clock of the API server cfg reaches, as told by
// the answers a transport wrapped by observe receives.
func newServerClock(cfg *rest.Config, local func() time.Time) *ServerClock {
	c := &ServerClock{local: local}
	if u, _, err := rest.DefaultServerUrlFor(cfg); err == nil {
		c.base = strings.TrimRight(u.Path, "/")
	}
	return c
}

// Now is the API server's time now.
func (c *ServerClock) Now() time.Time {
	now := c.local()
	r := c.last.Load()
	if r == nil {
		return now
	}
	return r.at(now)
}

// Since is how long ago t was on the API server's clock.
func (c *ServerClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// at is the server's time at local time now: the date plus the time
// passed since the answer came.
func (r *reading) at(now time.Time) time.Time {
	return r.date.Add(now.Sub(r.received)).Local()
}

// readingOf is what an answer with the Date header date, received at
// local time received, says of the server's clock; ok is false when it
// carries no Date svm can read.
func readingOf(date string, received time.Time) (_ reading, ok bool) {
	if date == "" {
		return reading{}, false
	}
	t, err := http.ParseTime(date)
	if err != nil {
		return reading{}, false
	}
	return reading{date: t, received: received}, true
}

// ownGroups are the API groups kube-apiserver serves itself, besides the
// core group: an aggregated API server's answers come through with its own
// Date, and its clock is not the one that stamps what svm compares. svm's
// own group is served by kube-apiserver (it is a CRD's); coordination.k8s.io's
// leases, renewed every few seconds by leader election, keep the reading
// fresh in svm controller.
var ownGroups = []string{"apiextensions.k8s.io", "migration.k8s.io", "coordination.k8s.io"}

// learnsFrom reports whether an answer to a request of path comes from
// kube-apiserver itself (ownGroups).
func (c *ServerClock) learnsFrom(path string) bool {
	p, ok := strings.CutPrefix(path, c.base)
	if !ok {
		return false
	}
	if p == "/api" || strings.HasPrefix(p, "/api/") {
		return true
	}
	for _, g := range ownGroups {
		if p == "/apis/"+g || strings.HasPrefix(p, "/apis/"+g+"/") {
			return true
		}
	}
	return false
}

// observe wraps rt so that every answer of the API server's own tells c
// its Date.
func (c *ServerClock) observe(rt http.RoundTripper) http.RoundTripper {
	return &observer{clock: c, rt: rt}
}

type observer struct {
	clock *ServerClock
	rt    http.RoundTripper
}

func (o *observer) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := o.rt.RoundTrip(req)
	if err != nil || !o.clock.learnsFrom(req.URL.Path) {
		return resp, err
	}
	if r, ok := readingOf(resp.Header.Get("Date"), o.clock.local()); ok {
		o.clock.last.Store(&r)
	}
	return resp, nil
}

// WrappedRoundTripper lets client-go find the transport beneath
// (utilnet.RoundTripperWrapper), as it does through its own wrappers.
func (o *observer) WrappedRoundTripper() http.RoundTripper { return o.rt }
