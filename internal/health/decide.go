package health

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// State is everything the probes decide from.
type State struct {
	Now time.Time
	// CachesSynced: every informer of the manager's cache has synced.
	CachesSynced bool
	Leadership   Leadership
	// Loops are the loops running now.
	Loops []Loop
}

// Leadership is what this replica knows of the leader election.
type Leadership struct {
	// Enabled is false when the replica runs without leader election: it
	// then leads alone.
	Enabled bool
	// Identity is this replica's identity in the lease.
	Identity string
	// Leading: this replica won the election and runs the leader's work.
	Leading bool
	// Renewed is when this replica last wrote the lease as its holder.
	Renewed time.Time
	// Holder is the lease's holder as last read or written; "" when it was
	// released or never seen.
	Holder string
	// Observed is when the lease was last seen to change. Like client-go's
	// leader elector, expiry is reckoned from this replica's own clock, never
	// from the times another replica wrote, so clock skew does not matter.
	Observed time.Time
	// LeaseDuration is the lease duration of the last lease seen.
	LeaseDuration time.Duration
}

// Loop is a loop that must show progress while it runs.
type Loop struct {
	Name string
	// LastBeat is when it last showed progress, or started.
	LastBeat time.Time
	// StallAfter: with no beat for longer, the loop is stuck.
	StallAfter time.Duration
}

// StallAfter is how long a loop that should show progress at least every
// interval may go without a beat before it counts as stuck: three
// intervals, and never less than five minutes, so that a slow API server
// or a short interval does not get a healthy replica restarted.
func StallAfter(interval time.Duration) time.Duration {
	return max(3*interval, 5*time.Minute)
}

// Ready reports why the replica is not ready, or nil.
func Ready(s State) error {
	if !s.CachesSynced {
		return errors.New("caches not synced")
	}
	l := s.Leadership
	if !l.Enabled || l.Leading {
		return nil
	}
	switch {
	case l.Holder == "":
		return errors.New("leadership not settled: no lease holder seen")
	case l.Holder == l.Identity:
		return errors.New("leadership not settled: lease acquired, leader not started yet")
	case !s.Now.Before(l.Observed.Add(l.LeaseDuration)):
		return fmt.Errorf("leadership not settled: the lease of %s expired %s ago", l.Holder, s.Now.Sub(l.Observed.Add(l.LeaseDuration)).Round(time.Second))
	}
	return nil
}

// Live reports why the replica must be restarted, or nil.
func Live(s State) error {
	var problems []string
	if l := s.Leadership; l.Enabled && l.Leading {
		switch {
		case l.Renewed.IsZero():
			problems = append(problems, "leading without having written the lease")
		case s.Now.Sub(l.Renewed) > l.LeaseDuration:
			problems = append(problems, fmt.Sprintf("leading without renewing the lease for %s (lease duration %s)", s.Now.Sub(l.Renewed).Round(time.Second), l.LeaseDuration))
		}
	}
	for _, loop := range s.Loops {
		if idle := s.Now.Sub(loop.LastBeat); idle > loop.StallAfter {
			problems = append(problems, fmt.Sprintf("%s stuck: no progress for %s (limit %s)", loop.Name, idle.Round(time.Second), loop.StallAfter))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(problems, "; "))
}
