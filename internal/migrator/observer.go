package migrator

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/svm-project/svm/internal/admission"
)

// Observer is told what the engine does, so that metrics and health checks
// can be built on it while the engine itself depends on no metrics library.
// Its methods are called from many workers at once and must return quickly.
//
// Events are reported per resource, never per object: the controller runs
// one migration per resource at a time, and object names would make
// unbounded metric labels.
type Observer interface {
	// RunStarted and RunEnded bracket every Run; err is what Run returns.
	RunStarted(resource schema.GroupResource)
	RunEnded(resource schema.GroupResource, err error)
	// Listed reports a chunk listed: listed is the number of objects the
	// migration has listed so far (counting the runs it resumes), remaining
	// the API server's estimate of objects not yet listed: nil when it gave
	// none, 0 after the last chunk.
	Listed(resource schema.GroupResource, listed int64, remaining *int64)
	// Requested reports an answered request (verb "list" or "patch"), or
	// one that failed without an answer; err is nil on success.
	Requested(resource schema.GroupResource, verb string, err error)
	// ObjectMigrated reports an object written back: restored when the
	// API server stored it anew, false when it was already current.
	ObjectMigrated(resource schema.GroupResource, restored bool)
	// ObjectSkipped reports an object that needed no write, and why; err
	// is the server's answer (Conflict, NotFound), or nil when no request
	// was sent.
	ObjectSkipped(resource schema.GroupResource, why SkipReason, err error)
	// ObjectFailed reports an object that could not be rewritten.
	ObjectFailed(resource schema.GroupResource, err error)
	// Refused reports a write an admission webhook or policy refused,
	// and whether the object was then written through its status
	// subresource (Request.ThroughStatus).
	Refused(resource schema.GroupResource, denial admission.Denial, throughStatus bool)
	// Retry reports a transient error that the engine will retry.
	Retry(resource schema.GroupResource, err error)
	// LimiterWaited reports how long a request waited for the rate limiter.
	LimiterWaited(resource schema.GroupResource, wait time.Duration)
	// Paced reports a decision of adaptive pacing (see pacer): a few
	// times a second while writes are answered, never per write.
	Paced(resource schema.GroupResource, state PacerState)
}

// SkipReason is why an object needed no write: each is one of Progress's
// counters.
type SkipReason int

const (
	// SkipWrittenSinceStart: written after the migration started
	// (Progress.WrittenSinceStart).
	SkipWrittenSinceStart SkipReason = iota
	// SkipWrittenSinceChange: written after Request.StoredSince, before
	// the migration started (Progress.WrittenSinceChange).
	SkipWrittenSinceChange
	// SkipGone: deleted (Progress.Gone).
	SkipGone
)

// NopObserver ignores everything. Embed it to observe only some events.
type NopObserver struct{}

// RunStarted implements Observer.
func (NopObserver) RunStarted(schema.GroupResource) {}

// RunEnded implements Observer.
func (NopObserver) RunEnded(schema.GroupResource, error) {}

// Listed implements Observer.
func (NopObserver) Listed(schema.GroupResource, int64, *int64) {}

// Requested implements Observer.
func (NopObserver) Requested(schema.GroupResource, string, error) {}

// ObjectMigrated implements Observer.
func (NopObserver) ObjectMigrated(schema.GroupResource, bool) {}

// ObjectSkipped implements Observer.
func (NopObserver) ObjectSkipped(schema.GroupResource, SkipReason, error) {}

// ObjectFailed implements Observer.
func (NopObserver) ObjectFailed(schema.GroupResource, error) {}

// Refused implements Observer.
func (NopObserver) Refused(schema.GroupResource, admission.Denial, bool) {}

// Retry implements Observer.
func (NopObserver) Retry(schema.GroupResource, error) {}

// LimiterWaited implements Observer.
func (NopObserver) LimiterWaited(schema.GroupResource, time.Duration) {}

// Paced implements Observer.
func (NopObserver) Paced(schema.GroupResource, PacerState) {}

// Observers tells each of obs everything, in order; nil entries are ignored.
func Observers(obs ...Observer) Observer {
	var out multiObserver
	for _, o := range obs {
		if o != nil {
			out = append(out, o)
		}
	}
	if len(out) == 1 {
		return out[0]
	}
	return out
}

type multiObserver []Observer

func (m multiObserver) RunStarted(r schema.GroupResource) {
	for _, o := range m {
		o.RunStarted(r)
	}
}

func (m multiObserver) RunEnded(r schema.GroupResource, err error) {
	for _, o := range m {
		o.RunEnded(r, err)
	}
}

func (m multiObserver) Listed(r schema.GroupResource, listed int64, remaining *int64) {
	for _, o := range m {
		o.Listed(r, listed, remaining)
	}
}

func (m multiObserver) Requested(r schema.GroupResource, verb string, err error) {
	for _, o := range m {
		o.Requested(r, verb, err)
	}
}

func (m multiObserver) ObjectMigrated(r schema.GroupResource, restored bool) {
	for _, o := range m {
		o.ObjectMigrated(r, restored)
	}
}

func (m multiObserver) ObjectSkipped(r schema.GroupResource, why SkipReason, err error) {
	for _, o := range m {
		o.ObjectSkipped(r, why, err)
	}
}

func (m multiObserver) ObjectFailed(r schema.GroupResource, err error) {
	for _, o := range m {
		o.ObjectFailed(r, err)
	}
}

func (m multiObserver) Retry(r schema.GroupResource, err error) {
	for _, o := range m {
		o.Retry(r, err)
	}
}

func (m multiObserver) LimiterWaited(r schema.GroupResource, d time.Duration) {
	for _, o := range m {
		o.LimiterWaited(r, d)
	}
}

func (m multiObserver) Refused(r schema.GroupResource, d admission.Denial, throughStatus bool) {
	for _, o := range m {
		o.Refused(r, d, throughStatus)
	}
}

func (m multiObserver) Paced(r schema.GroupResource, s PacerState) {
	for _, o := range m {
		o.Paced(r, s)
	}
}
