package framework

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Snapshot is every object of a resource, keyed by namespace/name, with the
// fields a rewrite may legitimately change removed: metadata.resourceVersion,
// and the timestamps and apiVersions in metadata.managedFields (svm moves the
// entries that name a version it lets go to the version kept). Everything
// else (spec, data, labels, annotations, generation, uid, the managers
// themselves, each with its operation and fields) must survive a migration
// unchanged.
type Snapshot map[string]map[string]any

// TakeSnapshot lists gvr and normalizes every object.
func (e *Env) TakeSnapshot(t testing.TB, gvr schema.GroupVersionResource) Snapshot {
	t.Helper()
	snap := Snapshot{}
	for _, item := range e.List(t, gvr) {
		snap[item.GetNamespace()+"/"+item.GetName()] = normalize(item)
	}
	return snap
}

func normalize(obj unstructured.Unstructured) map[string]any {
	o := obj.DeepCopy().Object
	unstructured.RemoveNestedField(o, "metadata", "resourceVersion")
	fields, _, _ := unstructured.NestedSlice(o, "metadata", "managedFields")
	for _, f := range fields {
		if m, ok := f.(map[string]any); ok {
			delete(m, "time")
			delete(m, "apiVersion")
		}
	}
	if fields != nil {
		_ = unstructured.SetNestedSlice(o, fields, "metadata", "managedFields")
	}
	return o
}

// Diff compares two snapshots and returns "" when they are equal.
func (s Snapshot) Diff(after Snapshot) string {
	return cmp.Diff(s, after)
}

// Without returns a copy of s without the given keys.
func (s Snapshot) Without(keys ...string) Snapshot {
	out := make(Snapshot, len(s))
	for k, v := range s {
		out[k] = v
	}
	for _, k := range keys {
		delete(out, k)
	}
	return out
}

// ExpectUnchanged reports an error unless every object of gvr still equals
// its snapshot in before.
func (e *Env) ExpectUnchanged(t testing.TB, gvr schema.GroupVersionResource, before Snapshot) {
	t.Helper()
	if diff := before.Diff(e.TakeSnapshot(t, gvr)); diff != "" {
		t.Errorf("objects of %s changed (-before +after):\n%s", gvr.Resource, diff)
	}
}

// TakeSnapshotInPages is TakeSnapshot listing in pages, as a client of a
// big resource should: one list of tens of thousands of objects can outlast
// the API server's request timeout on a busy machine. The pages are read at
// one resourceVersion, so the snapshot is as consistent as one list.
func (e *Env) TakeSnapshotInPages(t testing.TB, gvr schema.GroupVersionResource) Snapshot {
	t.Helper()
	snap := Snapshot{}
	e.listInPages(t, gvr, "", 1000, func(item unstructured.Unstructured) {
		snap[item.GetNamespace()+"/"+item.GetName()] = normalize(item)
	})
	return snap
}

// TakeDigests is TakeSnapshotInPages of the objects in namespace, each
// kept as the SHA-256 of its normalized content: a snapshot of large
// objects (Secrets of a megabyte) in a few kilobytes, which tells as
// surely whether any changed.
func (e *Env) TakeDigests(t testing.TB, gvr schema.GroupVersionResource, namespace string) Snapshot {
	t.Helper()
	snap := Snapshot{}
	e.listInPages(t, gvr, namespace, 50, func(item unstructured.Unstructured) {
		content, err := json.Marshal(normalize(item))
		if err != nil {
			t.Fatal(err)
		}
		snap[item.GetNamespace()+"/"+item.GetName()] = map[string]any{"sha256": fmt.Sprintf("%x", sha256.Sum256(content))}
	})
	return snap
}

// listInPages lists gvr in namespace ("" for all) in pages of limit and
// calls each with every object.
func (e *Env) listInPages(t testing.TB, gvr schema.GroupVersionResource, namespace string, limit int64, each func(unstructured.Unstructured)) {
	t.Helper()
	ctx := Context(t, 5*time.Minute)
	opts := metav1.ListOptions{Limit: limit}
	for {
		list, err := e.listCaughtUp(ctx, gvr, namespace, opts)
		if err != nil {
			t.Fatalf("list %s: %v", gvr, err)
		}
		for _, item := range list.Items {
			each(item)
		}
		if opts.Continue = list.GetContinue(); opts.Continue == "" {
			return
		}
	}
}

// ExpectUnchangedInPages is ExpectUnchanged with a snapshot taken in pages.
func (e *Env) ExpectUnchangedInPages(t testing.TB, gvr schema.GroupVersionResource, before Snapshot) {
	t.Helper()
	if diff := before.Diff(e.TakeSnapshotInPages(t, gvr)); diff != "" {
		t.Errorf("objects of %s changed (-before +after):\n%s", gvr.Resource, diff)
	}
}

// listCaughtUp lists gvr, waiting (within ctx) while the API server answers
// that its cache has not caught up with etcd yet ("Too large resource
// version"). A server busy decoding objects written straight into etcd, on
// a machine shared with other control planes, can take minutes to catch up,
// longer than client-go retries one request.
func (e *Env) listCaughtUp(ctx context.Context, gvr schema.GroupVersionResource, namespace string, opts metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	var list *unstructured.UnstructuredList
	var err error
	werr := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		list, err = e.Dynamic.Resource(gvr).Namespace(namespace).List(ctx, opts)
		return !apierrors.IsTimeout(err), nil
	})
	if err == nil {
		err = werr
	}
	return list, err
}

// ExpectWritesKept reports an error unless every object another client
// updated while a migration ran (updated, keyed like the snapshots) still
// has the spec.updatedBy it wrote, and every object it neither updated nor
// deleted is as it was before.
func ExpectWritesKept(t testing.TB, before, after Snapshot, updated, deleted map[string]bool) {
	t.Helper()
	for key := range updated {
		spec, _ := after[key]["spec"].(map[string]any)
		if spec == nil || spec["updatedBy"] == nil {
			t.Errorf("%s lost its concurrent update: spec %v", key, spec)
		}
	}
	touched := make([]string, 0, len(updated)+len(deleted))
	for key := range updated {
		touched = append(touched, key)
	}
	for key := range deleted {
		touched = append(touched, key)
	}
	if diff := before.Without(touched...).Diff(after.Without(touched...)); diff != "" {
		t.Errorf("untouched objects changed (-before +after):\n%s", diff)
	}
}
