package storagestate

import (
	"context"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	"github.com/svm-project/svm/internal/controller/round"
)

// seeReadTimeout bounds the read of a CRD whose generation moved: the
// watch's events wait for it.
const seeReadTimeout = 10 * time.Second

// seeingGenerations wraps the CRD watch's handler: on every update that
// moves a CRD's generation (a spec change), the CRD is read straight from
// the API server and shown to Epochs before the round is asked for.
//
// Epochs takes two generations one apart with one storage version for no
// storage move, and a gap for a possible one (a flip and a flip back).
// Rounds alone read a CRD only when they run: a long round (first sight
// of many resources, a loaded machine) may outlast two spec changes, and
// then sees a gap where nothing moved, restarting the wait for nothing.
// Reading at each change sees every generation the watch delivers one by
// one. A read that comes back with a later generation than the event's
// (two changes in quick succession), or a watch that resumed after a
// break, leaves a gap, which costs a restarted wait, never a missed move.
func (c *Controller) seeingGenerations(next handler.EventHandler) handler.EventHandler {
	return handler.Funcs{
		CreateFunc: next.Create,
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q round.Queue) {
			if e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() {
				c.seeGeneration(ctx, e.ObjectNew.GetName())
			}
			next.Update(ctx, e, q)
		},
		DeleteFunc:  next.Delete,
		GenericFunc: next.Generic,
	}
}

// notingGenerations is the handler of a second CRD watch that notes when
// each generation arrived (generationsSeen): the settle and drain waits
// of a storage change count from it. It asks for no round. A handler of
// its own gets the informer's events on its own, so that the reads
// seeingGenerations makes at each change (a thousand, throttled, after a
// bulk flip) do not date the later changes late.
func (c *Controller) notingGenerations() handler.EventHandler {
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, _ round.Queue) { c.seen.note(e.Object, c.Clock.Now()) },
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, _ round.Queue) { c.seen.note(e.ObjectNew, c.Clock.Now()) },
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, _ round.Queue) { c.seen.forget(e.Object.GetName()) },
	}
}

// generationsSeen is when the CRD watch first delivered each CRD's
// current generation, by name: what trigger.CRDStorage.SeenAt says. One
// small entry per CRD, dropped with it.
type generationsSeen struct {
	mu sync.Mutex
	at map[string]generationSeen
}

type generationSeen struct {
	uid        types.UID
	generation int64
	at         time.Time
}

// note records now for o's generation, unless that generation of that
// CRD was seen before.
func (s *generationsSeen) note(o client.Object, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.at[o.GetName()]; ok && cur.uid == o.GetUID() && cur.generation == o.GetGeneration() {
		return
	}
	if s.at == nil {
		s.at = map[string]generationSeen{}
	}
	s.at[o.GetName()] = generationSeen{uid: o.GetUID(), generation: o.GetGeneration(), at: now}
}

func (s *generationsSeen) forget(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.at, name)
}

// of is when crd's generation, as read, was first seen; zero when not
// seen (another generation or another CRD of the name was last seen).
func (s *generationsSeen) of(crd *apiextensionsv1.CustomResourceDefinition) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur, ok := s.at[crd.Name]
	if !ok || cur.uid != crd.UID || cur.generation != crd.Generation {
		return time.Time{}
	}
	return cur.at
}

// seeGeneration reads CRD name and shows it to Epochs. It lists by name,
// as the rest of the trigger reads CRDs, so that it needs no get. A read
// that fails sees nothing: the next round reads the CRD.
func (c *Controller) seeGeneration(ctx context.Context, name string) {
	if c.Epochs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, seeReadTimeout)
	defer cancel()
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := c.Reader.List(ctx, &crds, client.MatchingFields{"metadata.name": name}); err != nil {
		klog.FromContext(ctx).V(2).Info("Read a changed CRD", "crd", name, "err", err)
		return
	}
	for i := range crds.Items {
		c.Epochs.Of(&crds.Items[i], nil)
	}
}
