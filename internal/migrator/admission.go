package migrator

import (
	"context"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/svm-project/svm/internal/admission"
)

// Refusal is an admission webhook or policy that refused svm's writes, and
// how many objects it left failed. Objects re-stored through the status
// subresource after a refusal are not counted: they are migrated.
type Refusal struct {
	admission.Denial
	// Subresource is "status" when it refused the write through the
	// status subresource, "" for the object itself.
	Subresource string
	// Objects counts the objects it refused and that stayed failed.
	Objects int64
}

// String says who refused how many objects, and what it said, as the
// Failed condition and svm migrate's summary say it.
func (r Refusal) String() string { return r.Refused(r.Objects, r.Subresource) }

// refusals tallies refusals by who refused; each keeps the API server's
// first message.
type refusals struct {
	mu   sync.Mutex
	list []Refusal
}

func (t *refusals) add(d admission.Denial, subresource string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range t.list {
		r := &t.list[i]
		if r.Kind == d.Kind && r.Name == d.Name && r.Binding == d.Binding && r.Subresource == subresource {
			r.Objects++
			return
		}
	}
	t.list = append(t.list, Refusal{Denial: d, Subresource: subresource, Objects: 1})
}

func (t *refusals) snapshot() []Refusal {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Refusal(nil), t.list...)
}

// denied handles an object whose write an admission webhook or policy
// refused (denial, err); h is what its managedFields held. With
// Request.ThroughStatus, on a resource with a status subresource, it
// writes the object again through that subresource (writeThroughStatus),
// and through says it did; otherwise, or when that is refused too, the
// object fails and its refuser is counted. It returns an error only when
// the whole migration must stop.
func (r *run) denied(ctx context.Context, obj *metav1.PartialObjectMetadata, h held, denial admission.Denial, err error) (through bool, stop error) {
	if !r.req.ThroughStatus || !r.hasStatus {
		r.refused(obj, denial, "", err)
		return false, nil
	}
	a, serr := r.writeThroughStatus(ctx, obj, h)
	if serr == nil {
		if err := r.check(ctx, obj, h, a); err != nil {
			return false, err
		}
		r.observer.Refused(r.gr, denial, true)
		r.counters.throughStatus.Add(1)
		r.countWritten(obj.ResourceVersion, a.resourceVersion)
		return true, nil
	}
	if again, ok := admission.Denied(serr); ok {
		r.refused(obj, again, "status", serr)
		return false, nil
	}
	if apierrors.IsForbidden(serr) && isRBACDenial(serr) {
		return false, terminal(ReasonStatusForbidden, "rewrite %s %s through its status subresource, after %s refused its write: %w; "+
			"grant patch on its status subresource (the svm-status-writer ClusterRole, config/rbac/cli), or write without going through status",
			r.req.Resource.Resource, objectName(obj), denial.Who(), serr)
	}
	// Anything else (a conflict, the object gone, an outage) is what it
	// would be for the object's own write.
	return false, r.settle(ctx, obj, fmt.Errorf("through its status subresource: %w", serr))
}

// refused fails obj, whose write (through subresource, "" for the object
// itself) denial refused with err, and counts its refuser.
func (r *run) refused(obj *metav1.PartialObjectMetadata, denial admission.Denial, subresource string, err error) {
	r.observer.Refused(r.gr, denial, false)
	r.refusals.add(denial, subresource)
	r.recordFailure(obj, err)
}

// writeThroughStatus writes obj back through the status subresource: the
// same empty merge patch, with the same uid and resourceVersion
// preconditions. The API server's status strategy keeps every field but
// status from the stored object and, since the patch sets nothing, status
// too, so the object is stored as it was, re-encoded in the storage
// version and under the current key, exactly as the object's own write
// would have stored it. Admission rules name the subresources they cover:
// a webhook or policy registered for the resource alone is not asked. The
// field manager runs on it as on any write: the answer is read for
// managedFields when h had entries (see check).
func (r *run) writeThroughStatus(ctx context.Context, obj *metav1.PartialObjectMetadata, h held) (writeAnswer, error) {
	var a writeAnswer
	err := r.retry(ctx, "patch", func(ctx context.Context) error {
		var err error
		a, err = r.patch(ctx, obj, patchAs{subresource: "status", entries: len(h) > 0})
		return err
	})
	return a, err
}
