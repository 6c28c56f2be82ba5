package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// CreateWidgets creates n widgets spread over the given namespaces (created
// if missing), each with distinct spec, labels, annotations and data so that
// any change to content is visible. It uses a few parallel writers.
func (e *Env) CreateWidgets(t testing.TB, version string, namespaces []string, n int) {
	t.Helper()
	e.createObjects(t, WidgetResource, version, "widget", namespaces, n)
}

// CreateObjects creates n objects of r in v1, named obj-00000 on, spread
// over namespaces (created if missing), with a few parallel writers.
func (e *Env) CreateObjects(t testing.TB, r Resource, namespaces []string, n int) {
	t.Helper()
	e.createObjects(t, r, "v1", "obj", namespaces, n)
}

// StoredInOldVersion creates n objects of r (whose CRD stores v1, as
// CreateResource and NewResource leave it) over namespaces, snapshots
// them, and makes v2 the storage version: every object then needs a
// migration. It returns the snapshot, for ExpectUnchanged.
func (e *Env) StoredInOldVersion(t testing.TB, r Resource, namespaces []string, n int) Snapshot {
	t.Helper()
	e.CreateObjects(t, r, namespaces, n)
	before := e.TakeSnapshot(t, r.GVR("v1"))
	e.SetStorage(t, r, "v2")
	e.WaitWritesStoredIn(t, r, "v2")
	return before
}

// WaitWritesStoredIn waits until a write of r lands in etcd in version.
// Discovery's storageVersionHash and the handler that writes r's objects
// learn of a CRD's new storage version each on its own: under load,
// discovery may say v2 while a write is still stored in v1, and a
// migration started then would leave that object behind. A probe object,
// created and deleted in the default namespace until it is stored in
// version, says that the handler has moved too. A test that runs svm's
// engine right after a flip calls it (svm controller's trigger waits for
// the same reason: --crd-settle-delay).
func (e *Env) WaitWritesStoredIn(t testing.TB, r Resource, version string) {
	t.Helper()
	const namespace = "default"
	ctx := Context(t, time.Minute)
	client := e.Dynamic.Resource(r.GVR(version)).Namespace(namespace)
	name := "storage-probe-" + string(uuid.NewUUID())[:8]
	key := r.EtcdPrefix() + namespace + "/" + name
	for {
		if _, err := client.Create(ctx, r.Object(version, name, 0), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		stored := e.StoredVersions(t, key)
		if err := client.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete %s: %v", name, err)
		}
		if stored[r.Group+"/"+version] == 1 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("a write of %s is still stored as %v a minute after discovery said %s", r.Plural, stored, version)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (e *Env) createObjects(t testing.TB, r Resource, version, prefix string, namespaces []string, n int) {
	t.Helper()
	for _, ns := range namespaces {
		e.CreateNamespace(t, ns)
	}
	inParallel(t, "create "+r.Plural, n, func(ctx context.Context, i int) error {
		ns := namespaces[i%len(namespaces)]
		_, err := e.Dynamic.Resource(r.GVR(version)).Namespace(ns).Create(ctx, r.Object(version, fmt.Sprintf("%s-%05d", prefix, i), i), metav1.CreateOptions{})
		return err
	})
}

// inParallel runs do for 0 to n-1 with a few parallel writers, and fails
// the test with the first error.
func inParallel(t testing.TB, what string, n int, do func(ctx context.Context, i int) error) {
	t.Helper()
	g, ctx := errgroup.WithContext(Context(t, 10*time.Minute))
	g.SetLimit(8)
	for i := range n {
		g.Go(func() error { return do(ctx, i) })
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Secrets are the core Secrets, for TakeSnapshot and ExpectUnchanged.
var Secrets = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// SecretData is the data of Secret number i that CreateSecrets writes:
// distinct per Secret, so that a test can look for it where it must not
// be (in logs and output).
func SecretData(i int) map[string][]byte {
	return map[string][]byte{"password": fmt.Appendf(nil, "s3cr3t-%05d-%s", i, "do-not-print"), "blob": make([]byte, 100+i%50)}
}

// CreateSecrets creates n Secrets named secret-00000 on, with SecretData,
// spread over namespaces (created if missing), with a few parallel
// writers.
func (e *Env) CreateSecrets(t testing.TB, namespaces []string, n int) {
	t.Helper()
	for _, ns := range namespaces {
		e.CreateNamespace(t, ns)
	}
	inParallel(t, "create secrets", n, func(ctx context.Context, i int) error {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("secret-%05d", i), Namespace: namespaces[i%len(namespaces)], Labels: map[string]string{"index": fmt.Sprint(i)}},
			Data:       SecretData(i),
		}
		_, err := e.Kube.CoreV1().Secrets(s.Namespace).Create(ctx, s, metav1.CreateOptions{})
		return err
	})
}

// Widget returns widget number i, named name, in the given API version.
func Widget(version, name string, i int) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": Widgets.Group + "/" + version,
		"kind":       "Widget",
		"metadata": map[string]any{
			"name":        name,
			"labels":      map[string]any{"index": fmt.Sprint(i), "parity": []string{"even", "odd"}[i%2]},
			"annotations": map[string]any{"example.com/note": fmt.Sprintf("widget number %d", i)},
		},
		"spec": map[string]any{"size": int64(i), "color": []any{"red", "green", "blue"}[i%3], "tags": []any{"a", fmt.Sprint(i)}},
		"data": map[string]any{"payload": fmt.Sprintf("%0128d", i)},
	}}
}

// Object is object number i of the resource, named name, in version, with
// the distinct content of Widget.
func (r Resource) Object(version, name string, i int) *unstructured.Unstructured {
	obj := Widget(version, name, i)
	obj.SetAPIVersion(r.Group + "/" + version)
	obj.SetKind(r.Kind)
	return obj
}

// CreateNamespace creates a namespace unless it exists.
func (e *Env) CreateNamespace(t testing.TB, name string) {
	t.Helper()
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name}}}
	_, err := e.Dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(Context(t, time.Minute), ns, metav1.CreateOptions{})
	if err != nil && !IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// List lists every object of gvr in all namespaces.
func (e *Env) List(t testing.TB, gvr schema.GroupVersionResource) []unstructured.Unstructured {
	t.Helper()
	list, err := e.Dynamic.Resource(gvr).List(Context(t, 5*time.Minute), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list %s: %v", gvr, err)
	}
	return list.Items
}

// SeedWidgets makes n widgets in version, spread over namespaces as
// CreateWidgets spreads them and with the same contents, but writes all but
// the first straight into etcd. Creating tens of thousands of objects
// through the API costs minutes of API server CPU on a shared two-core
// machine, and a migration only needs them stored: the first widget is
// created through the API, and its stored form (creationTimestamp,
// generation and managedFields included) is the model for the others, which
// differ only in name, uid and content. kube-apiserver then serves them like
// any other object; a consistent list sees them at once.
func (e *Env) SeedWidgets(t testing.TB, version string, namespaces []string, n int) {
	t.Helper()
	e.SeedWidgetsWrittenThrough(t, version, version, namespaces, n)
}

// SeedWidgetsWrittenThrough is SeedWidgets with the model widget created
// through API version through: every widget is stored in version (which
// must be the CRD's storage version) and its managedFields name through,
// as if its writer wrote it through through. A migration that prunes
// version from the CRD then has no managedFields entry to move.
func (e *Env) SeedWidgetsWrittenThrough(t testing.TB, version, through string, namespaces []string, n int) {
	t.Helper()
	start := time.Now()
	for _, ns := range namespaces {
		e.CreateNamespace(t, ns)
	}
	ctx := Context(t, 5*time.Minute)
	gvr := schema.GroupVersionResource{Group: Widgets.Group, Version: through, Resource: Widgets.Resource}
	first := Widget(through, "widget-00000", 0)
	if _, err := e.Dynamic.Resource(gvr).Namespace(namespaces[0]).Create(ctx, first, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the model widget: %v", err)
	}
	prefix := EtcdPrefix(Widgets.GroupResource())
	resp, err := e.Etcd.Get(ctx, prefix+namespaces[0]+"/widget-00000")
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("read the model widget from etcd: %v (%d values)", err, len(resp.Kvs))
	}
	var model struct {
		Metadata map[string]any `json:"metadata"`
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &model); err != nil {
		t.Fatalf("decode the model widget: %v", err)
	}

	// etcd takes at most 128 operations per transaction by default.
	const batch = 128
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for from := 1; from < n; from += batch {
		g.Go(func() error {
			var ops []clientv3.Op
			for i := from; i < min(from+batch, n); i++ {
				ns, name := namespaces[i%len(namespaces)], fmt.Sprintf("widget-%05d", i)
				obj := Widget(version, name, i).Object
				meta := maps.Clone(model.Metadata)
				for _, k := range []string{"name", "labels", "annotations"} {
					meta[k] = obj["metadata"].(map[string]any)[k]
				}
				meta["namespace"], meta["uid"] = ns, string(uuid.NewUUID())
				obj["metadata"] = meta
				data, err := json.Marshal(obj)
				if err != nil {
					return err
				}
				ops = append(ops, clientv3.OpPut(prefix+ns+"/"+name, string(data)+"\n"))
			}
			_, err := e.Etcd.Txn(ctx).Then(ops...).Commit()
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("write widgets into etcd: %v", err)
	}
	// The API server learns of the widgets from its watch on etcd: wait
	// until it lists them.
	if _, err := e.listCaughtUp(Context(t, 5*time.Minute), gvr, "", metav1.ListOptions{Limit: 1}); err != nil {
		t.Fatalf("list the widgets written into etcd: %v", err)
	}
	t.Logf("made %d widgets in %s", n, time.Since(start).Round(time.Millisecond))
}
