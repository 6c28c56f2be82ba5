package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svm-project/svm/test/framework"
)

// watched holds the latest state of every object of one kind, from one
// list and a watch that goes on across the API server's ends of a watch,
// until stop. A benchmark that waits for svm reads how far it got from
// here: listing a thousand CRDs or StorageStates every second, as the
// waits once did, cost the API server and the benchmark's process about
// a tenth of the two cores svm was measured on.
type watched[T client.Object] struct {
	mu     sync.Mutex
	items  map[string]T
	err    error
	cancel context.CancelFunc
	done   sync.WaitGroup
}

// watchAll lists the objects of list's kind that match labelSelector
// ("" for all) and watches them until stop.
func watchAll[T client.Object](b *testing.B, env *framework.Env, list client.ObjectList, labelSelector string) *watched[T] {
	b.Helper()
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: framework.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	raw := func(o *metav1.ListOptions) *client.ListOptions {
		o.LabelSelector = labelSelector
		return &client.ListOptions{Raw: o}
	}
	if err := wc.List(framework.Context(b, time.Minute), list, raw(&metav1.ListOptions{})); err != nil {
		b.Fatalf("list %T: %v", list, err)
	}
	objects, err := meta.ExtractList(list)
	if err != nil {
		b.Fatal(err)
	}
	w := &watched[T]{items: make(map[string]T, len(objects))}
	for _, o := range objects {
		w.record(watch.Added, o)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return wc.Watch(ctx, list.DeepCopyObject().(client.ObjectList), raw(&o))
	}}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.GetResourceVersion(), lw)
	if err != nil {
		b.Fatal(err)
	}
	w.done.Go(func() {
		defer rw.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-rw.ResultChan():
				if !ok {
					w.fail(fmt.Errorf("the watch of %T ended", list))
					return
				}
				w.record(e.Type, e.Object)
			}
		}
	})
	b.Cleanup(w.stop)
	return w
}

func (w *watched[T]) record(t watch.EventType, o any) {
	obj, ok := o.(T)
	if t == watch.Bookmark {
		return
	}
	if !ok {
		if t == watch.Error {
			w.fail(fmt.Errorf("watch error: %v", o))
		}
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if t == watch.Deleted {
		delete(w.items, obj.GetName())
		return
	}
	w.items[obj.GetName()] = obj
}

func (w *watched[T]) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
}

// count is how many objects held now satisfy ok, or the error that ended
// the watch.
func (w *watched[T]) count(ok func(T) bool) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, o := range w.items {
		if ok(o) {
			n++
		}
	}
	return n, w.err
}

// find is an object held now that satisfies ok, with whether there is
// one.
func (w *watched[T]) find(ok func(T) bool) (T, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, o := range w.items {
		if ok(o) {
			return o, true
		}
	}
	var zero T
	return zero, false
}

func (w *watched[T]) stop() {
	w.cancel()
	w.done.Wait()
}
