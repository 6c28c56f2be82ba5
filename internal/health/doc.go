// Package health decides the readiness and liveness of `svm controller`, as
// served on --health-probe-bind-address (/readyz and /healthz).
//
// A probe that always answers yes tells Kubernetes nothing, and one that
// fails for reasons a restart cannot fix turns an API server outage into a
// crash loop. So readiness says "this replica can do its part now", and
// liveness fails only when this replica is wedged in a way only a restart
// cures.
//
// Ready: the manager's caches are synced, and leadership is settled: this
// replica leads, or it has seen another replica hold a lease that has not
// expired (without leader election it leads alone). A follower that cannot
// read the lease, or that sees it expired and has not yet taken over, is not
// ready: it could neither take over nor tell that someone else works.
//
// Live, unless one of these holds:
//
//   - this replica believes it leads but has not renewed its lease for a
//     lease duration: the other replicas then consider the lease expired and
//     one of them takes over while this one still migrates. (A leader whose
//     renewals fail gives up by itself after the renew deadline; this
//     catches an elector that is stuck.)
//   - a loop that must come round is stuck: the triggering controller, which
//     finishes a round at least every --trigger-interval, or a running
//     migration, which finishes a request at least every few seconds, has
//     shown no progress for longer than StallAfter of its interval.
//
// The decisions (Ready, Live, StallAfter) are pure functions of a State and
// take the time as an input, so they are table-tested; Tracker gathers the
// State from the leader elector's lease lock, the trigger loop and the
// migration engine.
package health
