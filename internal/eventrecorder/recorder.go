// Package eventrecorder records events.k8s.io/v1 Events through a bounded
// queue and keeps nothing once an Event is sent.
//
// client-go's events broadcaster keeps a copy of every Event it sent for
// six to twelve minutes (to merge repeats into a series) and starts a
// goroutine per Event: after a bulk storage flip, svm's thousands of
// Events were a third of its heap. svm's Events rarely repeat (each names
// one migration, hash or prune), so they are sent as they are, by one
// goroutine, from a queue of fixed capacity; an Event that finds the
// queue full, or that the API server refuses, is dropped and counted,
// never retried in a storm: Events are a courtesy to the operator, the
// migrations' conditions and StorageStates are the record.
package eventrecorder

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	typedeventsv1 "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/reference"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Why an Event was dropped: the drop callback's reason.
const (
	// DroppedQueueFull: more Events were waiting than the queue holds.
	DroppedQueueFull = "queue_full"
	// DroppedRefused: the API server refused the Event, or did not answer
	// after the retries.
	DroppedRefused = "refused"
	// DroppedInvalid: the Event could not be made (no reference to the
	// object it regards, or an unknown type).
	DroppedInvalid = "invalid"
)

// maxNote is the longest note the API server accepts, in bytes.
const maxNote = 1024

// Sender sends the Events of every Recorder it made, one at a time. The
// zero value is not usable: call New.
type Sender struct {
	client  typedeventsv1.EventsGetter
	scheme  *runtime.Scheme
	queue   chan *eventsv1.Event
	dropped func(reason string)
	clock   clock.Clock
	// retry spaces the attempts at one Event on a transient error.
	retry wait.Backoff
	host  string
}

// New returns a Sender over client whose queue holds capacity Events;
// dropped (may be nil) is called with the reason of every Event dropped.
// It sends while Start runs: run it until what makes Events has stopped.
func New(client typedeventsv1.EventsGetter, scheme *runtime.Scheme, capacity int, dropped func(reason string)) *Sender {
	host, _ := os.Hostname()
	if dropped == nil {
		dropped = func(string) {}
	}
	return &Sender{
		client: client, scheme: scheme, queue: make(chan *eventsv1.Event, capacity), dropped: dropped,
		clock: clock.RealClock{}, retry: wait.Backoff{Duration: time.Second, Factor: 2, Steps: 3}, host: host,
	}
}

// Recorder returns a recorder whose Events name reportingController as
// theirs, and this host as their instance, as client-go's do.
func (s *Sender) Recorder(reportingController string) events.EventRecorder {
	return recorder{s: s, controller: reportingController, instance: reportingController + "-" + s.host}
}

// drainTime is how long sends outlive Start's context: the last Events
// (a run's outcome at shutdown) are still sent, within the manager's
// graceful shutdown.
const drainTime = 5 * time.Second

// Start sends queued Events until ctx is done, then what is still queued,
// for at most drainTime more.
func (s *Sender) Start(ctx context.Context) error {
	sendCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(drainTime, cancel) })
	defer stop()
	for {
		select {
		case ev := <-s.queue:
			s.send(sendCtx, ev)
		case <-ctx.Done():
			for {
				select {
				case ev := <-s.queue:
					s.send(sendCtx, ev)
				default:
					return nil
				}
			}
		}
	}
}

// send creates ev, retrying a few times when the API server did not
// answer or asked to wait, and counts it dropped when it is not created.
func (s *Sender) send(ctx context.Context, ev *eventsv1.Event) {
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, s.retry, func(ctx context.Context) (bool, error) {
		_, last = s.client.Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
		switch {
		case last == nil || apierrors.IsAlreadyExists(last):
			return true, nil
		case transient(last):
			return false, nil
		default:
			return false, last
		}
	})
	if err != nil {
		// The note names hashes, versions and migrations, never object
		// contents; the log says which Event, not what it said.
		klog.FromContext(ctx).V(2).Info("Event dropped", "reason", ev.Reason, "regarding", ev.Regarding.Kind+"/"+ev.Regarding.Name, "err", last)
		s.dropped(DroppedRefused)
	}
}

// transient: another attempt may succeed.
func transient(err error) bool {
	return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) || !isStatus(err)
}

// isStatus: the API server answered (with a status), as opposed to a
// connection that failed.
func isStatus(err error) bool {
	var status apierrors.APIStatus
	return errors.As(err, &status)
}

type recorder struct {
	s                    *Sender
	controller, instance string
}

// Eventf queues the Event; it never blocks.
func (r recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	ev, err := r.build(regarding, related, eventtype, reason, action, fmt.Sprintf(note, args...))
	if err != nil {
		r.s.dropped(DroppedInvalid)
		return
	}
	select {
	case r.s.queue <- ev:
	default:
		r.s.dropped(DroppedQueueFull)
	}
}

// build makes the Event as client-go's recorder does: named after the
// object it regards and the time, in its namespace (default for a
// cluster-scoped one).
func (r recorder) build(regarding, related runtime.Object, eventtype, reason, action, note string) (*eventsv1.Event, error) {
	if eventtype != corev1.EventTypeNormal && eventtype != corev1.EventTypeWarning {
		return nil, fmt.Errorf("event type %q", eventtype)
	}
	ref, err := reference.GetReference(r.s.scheme, regarding)
	if err != nil {
		return nil, err
	}
	var relatedRef *corev1.ObjectReference
	if related != nil {
		// As client-go: an Event whose related object has no reference
		// is still worth sending about the object it regards.
		relatedRef, _ = reference.GetReference(r.s.scheme, related)
	}
	now := r.s.clock.Now()
	namespace := ref.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	if len(note) > maxNote {
		note = strings.ToValidUTF8(note[:maxNote], "")
	}
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", ref.Name, now.UnixNano()), Namespace: namespace},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: r.controller, ReportingInstance: r.instance,
		Action: action, Reason: reason, Type: eventtype, Note: note,
		Regarding: *ref, Related: relatedRef,
	}, nil
}
