package storagestate

import (
	"context"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
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
