package migrator

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
)

// changes learns, from a watch that starts at the checkpoint, which objects
// others wrote or deleted after it, so that svm does not write them again.
//
// A chunked list is served from one snapshot, the checkpoint's: an object
// written by someone else after the migration started is still listed
// with its old resourceVersion, and without this it would cost a write
// answered by 409 Conflict. Such an object is already stored in the
// current storage version and under the current key (it was written after
// the migration started, like the objects newerThan skips), and a deleted
// one needs nothing.
//
// Lists return objects in the order of their etcd keys (namespace, then
// name: the order of objectName), so only keys after the last one
// handed to a worker can still be listed: changes to earlier keys (svm's
// own writes among them) are not recorded, and a recorded key is forgotten
// once it is looked up. Memory is bounded by limit keys; beyond it, changes
// are no longer recorded and cost the 409 they always did.
//
// The watch is an optimisation only: when it cannot be had (no watch
// permission, a server that does not sort its lists) svm writes as it
// would without it, and when etcd has compacted the checkpoint away it
// starts from the latest resourceVersion, the changes before costing their
// 409s. It is started only at the first sign of another writer (see
// run.watchOthers), so a resource nobody else writes costs no watch.
type changes struct {
	limit int
	// checkpoint is the migration's: only changes after it are recorded,
	// whatever a server sends.
	checkpoint string

	mu sync.Mutex
	// passed is the key of the last object handed to a worker; nothing at
	// or before it is recorded. Unset until the first object of this run.
	passed  string
	started bool
	// changed holds, for each recorded key, whether its last change was
	// a deletion.
	changed map[string]bool
}

func newChanges(limit int, checkpoint string) *changes {
	return &changes{limit: limit, checkpoint: checkpoint, changed: map[string]bool{}}
}

// record notes that the object with key was written (or, with deleted,
// deleted) after the checkpoint. The last change counts: an object deleted
// and created again is a new object, written after the checkpoint.
func (c *changes) record(key string, deleted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.changed[key]; !ok && ((c.started && key <= c.passed) || len(c.changed) >= c.limit) {
		return
	}
	c.changed[key] = deleted
}

// pass is called before the object with key is handed to a worker.
func (c *changes) pass(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started {
		// A resumed run starts in the middle: forget what was recorded
		// for keys it will not list again (svm's own writes before it
		// stopped, mostly).
		for k := range c.changed {
			if k < key {
				delete(c.changed, k)
			}
		}
		c.started = true
	}
	c.passed = max(c.passed, key)
}

// take reports whether the object with key was written or deleted after
// the checkpoint, and which, and forgets it: each key is listed once.
func (c *changes) take(key string) (changed, deleted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	deleted, changed = c.changed[key]
	delete(c.changed, key)
	return changed, deleted
}

// watch records every change to the resource after resourceVersion until
// ctx ends or the watch can no longer be had. wait, if set, is called
// before every request (the rate limiter).
func (c *changes) watch(ctx context.Context, client metadata.ResourceInterface, wait func(context.Context) error) {
	resourceVersion := c.checkpoint
	// A watch the server ends or refuses right away, over and over, is
	// not worth keeping up.
	const maxQuickEnds = 3
	quickEnds := 0
	for quickEnds < maxQuickEnds {
		// A watch without a resourceVersion (or "0") begins with an
		// ADDED event for every object there is: it would pass every
		// object as written after the checkpoint. Never.
		if resourceVersion == "" || resourceVersion == "0" {
			return
		}
		if wait != nil && wait(ctx) != nil {
			return
		}
		started := time.Now()
		w, err := client.Watch(ctx, metav1.ListOptions{ResourceVersion: resourceVersion, AllowWatchBookmarks: true})
		next := resourceVersion
		if err == nil {
			next, err = c.drain(w, resourceVersion)
		}
		switch {
		case ctx.Err() != nil:
			return
		case err == nil:
			// The server ended the watch (they time out): go on from
			// where it was.
		case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
			// etcd compacted past resourceVersion: what changed since is
			// unknown (each such object costs the 409 it always did), but
			// later changes can still be learnt.
			if next, err = currentResourceVersion(ctx, client, wait); err != nil {
				return
			}
		case IsTransient(err):
			// Try again from where it was, a little later.
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		case err != nil:
			return // forbidden, unsupported: write as before
		}
		resourceVersion = next
		if time.Since(started) < 2*time.Second {
			quickEnds++
		} else {
			quickEnds = 0
		}
	}
}

// drain records w's events until it ends and returns the resourceVersion
// to watch again from (the last one seen) and the error the watch ended
// with, if any.
func (c *changes) drain(w watch.Interface, resourceVersion string) (string, error) {
	defer w.Stop()
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			return resourceVersion, apierrors.FromObject(ev.Object)
		}
		obj, ok := ev.Object.(*metav1.PartialObjectMetadata)
		if !ok {
			return resourceVersion, fmt.Errorf("unexpected %T in a watch event", ev.Object)
		}
		// Only a change after the checkpoint makes a write unneeded. A
		// server that replays objects it already had (as a watch from
		// no resourceVersion would) must not pass them as written.
		if ev.Type != watch.Bookmark && newerThan(obj.ResourceVersion, c.checkpoint) {
			c.record(objectName(obj), ev.Type == watch.Deleted)
		}
		resourceVersion = obj.ResourceVersion
	}
	return resourceVersion, nil
}

// currentResourceVersion is the resource's latest resourceVersion, from the
// cheapest consistent list there is.
func currentResourceVersion(ctx context.Context, client metadata.ResourceInterface, wait func(context.Context) error) (string, error) {
	if wait != nil {
		if err := wait(ctx); err != nil {
			return "", err
		}
	}
	list, err := client.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return "", err
	}
	return list.ResourceVersion, nil
}
