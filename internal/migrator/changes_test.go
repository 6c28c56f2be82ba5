package migrator

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
)

func TestChangesRemembersOnlyObjectsStillToCome(t *testing.T) {
	c := newChanges(100, "10")
	// Before this run hands out its first object, everything is noted...
	c.record("a/earlier", false)
	c.record("b/w-5", false)
	// ...and what lies before the first object is forgotten then: a
	// resumed run does not list it again.
	c.pass("b/w-1")
	c.record("b/w-0", false) // svm's own write, or one to an object already handled
	c.record("b/w-1", false)
	c.record("b/w-9", false)
	c.record("c/w-0", false)

	for _, tc := range []struct {
		key  string
		want bool
	}{
		{"a/earlier", false},
		{"b/w-0", false},
		{"b/w-1", false},
		{"b/w-5", true},
		{"b/w-9", true},
		{"c/w-0", true},
		{"c/w-1", false},
	} {
		if got, _ := c.take(tc.key); got != tc.want {
			t.Errorf("take(%q) = %v, want %v", tc.key, got, tc.want)
		}
	}
	// Each key is listed once: a second look finds nothing.
	if changed, _ := c.take("b/w-5"); changed {
		t.Error("take(b/w-5) twice = true, want false the second time")
	}
	if len(c.changed) != 0 {
		t.Errorf("%d keys kept after every one was taken", len(c.changed))
	}
}

// TestChangesLastChangeCounts: an object deleted and created again is a new
// object written after the checkpoint, not a gone one.
func TestChangesLastChangeCounts(t *testing.T) {
	c := newChanges(100, "10")
	c.record("ns/a", true)
	c.record("ns/a", false)
	c.record("ns/b", false)
	c.record("ns/b", true)
	if changed, deleted := c.take("ns/a"); !changed || deleted {
		t.Errorf("ns/a re-created: changed %v, deleted %v", changed, deleted)
	}
	if changed, deleted := c.take("ns/b"); !changed || !deleted {
		t.Errorf("ns/b deleted last: changed %v, deleted %v", changed, deleted)
	}
}

func TestChangesIsBounded(t *testing.T) {
	c := newChanges(3, "10")
	c.pass("a")
	for _, k := range []string{"b", "c", "d", "e"} {
		c.record(k, false)
	}
	if len(c.changed) != 3 {
		t.Fatalf("%d keys kept, want the limit of 3", len(c.changed))
	}
	if changed, _ := c.take("e"); changed {
		t.Error("a key past the limit was kept")
	}
	// Taking one makes room again.
	c.take("b")
	c.record("f", false)
	if changed, _ := c.take("f"); !changed {
		t.Error("a key recorded after room was made is missing")
	}
}

func TestChangesDrainRecordsEveryKindOfChange(t *testing.T) {
	c := newChanges(100, "10")
	w := watch.NewFake()
	obj := func(ns, name, rv string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: rv}}
	}
	go func() {
		w.Add(obj("ns", "added", "11"))
		w.Modify(obj("ns", "modified", "12"))
		w.Delete(obj("ns", "deleted", "13"))
		// An object as it was at the checkpoint, replayed: not a change.
		w.Add(obj("ns", "replayed", "9"))
		w.Action(watch.Bookmark, obj("", "", "20"))
		w.Stop()
	}()
	if rv, err := c.drain(w, "10"); rv != "20" || err != nil {
		t.Errorf("drain returned resourceVersion %q, %v; want the bookmark's 20 to watch again from", rv, err)
	}
	for key, wantDeleted := range map[string]bool{"ns/added": false, "ns/modified": false, "ns/deleted": true} {
		if changed, deleted := c.take(key); !changed || deleted != wantDeleted {
			t.Errorf("%s: recorded %v, deleted %v; want recorded, deleted %v", key, changed, deleted, wantDeleted)
		}
	}
	if changed, _ := c.take("ns/replayed"); changed {
		t.Error("an object unchanged since the checkpoint was recorded as changed")
	}

	// An error event (the checkpoint was compacted away) ends the watch
	// with the server's error.
	w = watch.NewFake()
	go func() {
		w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired})
	}()
	if rv, err := c.drain(w, "10"); !apierrors.IsResourceExpired(err) || rv != "10" {
		t.Errorf("drain after an error event returned %q, %v; want the resourceVersion it had and the 410 Expired", rv, err)
	}
}

// TestChangesNeverWatchesFromNothing: a watch without a resourceVersion
// starts with an ADDED event for every object, which would pass them all
// as written after the checkpoint, unmigrated.
func TestChangesNeverWatchesFromNothing(t *testing.T) {
	for _, rv := range []string{"", "0"} {
		c := newChanges(100, rv)
		client := &countingWatches{}
		c.watch(context.Background(), client, nil)
		if client.watches != 0 {
			t.Errorf("from resourceVersion %q: %d watches sent, want none", rv, client.watches)
		}
	}
}

// TestChangesGivesUpOnAWatchThatKeepsEnding: a server that ends every
// watch at once is asked again from where the last one was, a few times,
// and then no more.
func TestChangesGivesUpOnAWatchThatKeepsEnding(t *testing.T) {
	c := newChanges(100, "10")
	client := &countingWatches{}
	c.watch(context.Background(), client, nil)
	if client.watches != 3 {
		t.Errorf("%d watches sent, want 3 before giving up", client.watches)
	}
}

// countingWatches is a metadata client that counts watch requests and
// supports nothing else.
type countingWatches struct {
	metadata.ResourceInterface
	watches int
}

func (c *countingWatches) Watch(context.Context, metav1.ListOptions) (watch.Interface, error) {
	c.watches++
	return watch.NewEmptyWatch(), nil
}
