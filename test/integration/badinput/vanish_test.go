package badinput_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/migrator"
	"github.com/svm-project/svm/test/framework"
)

// When a CRD is deleted during its migration, the API server deletes every
// one of its objects, then stops serving the resource. svm cannot tell a
// deleted CRD from a resource that merely stopped being served (an API
// server of a skewed version behind the same load balancer, an APIService
// removed for a while), whose objects not rewritten would still be in etcd
// in the old version. So a write or a list that meets the resource gone
// ends the migration Failed with ResourceNotFound, at once and for good,
// whether its list had reached the end or not: a write answered by a 404
// that names no object is confirmed with a list, and none of the objects
// left is counted gone. Claiming success would let the trigger record a
// storage version that some objects may not have; a Failed migration with
// the server's message says exactly what happened and costs a new
// migration if the resource comes back. An object whose own write was
// under way when the API server deleted it is found deleted (its 404 names
// it): skipped as gone.
//
// Both scenarios hold every rewrite of svm's in an admission webhook until
// the CRD is gone, so the deletion lands deterministically after the first
// list and before the third one (or before the end, with one chunk). Only
// the writes in flight then are held: at most adaptive pacing's first
// window, far fewer than a chunk, so the others meet the resource gone.

// maxHeld bounds the writes held when the CRD goes: adaptive pacing's
// first window (initialWindow in internal/migrator).
const maxHeld = 8

func (s *suite) crdDeletedAfterLastList(t *testing.T) {
	r := framework.Resource{Group: "gone-late.example.com", Plural: "latecomers", Kind: "Latecomer"}
	const n = 60 // one chunk: the list has ended when the CRD goes
	m, writes := s.deleteCRDMidMigration(t, r, "crd-gone-late", n)
	expectResourceNotFound(t, m)
	if p := m.Status.Progress; p.Listed != n || p.Skipped() > maxHeld || p.Migrated() != 0 || p.Failed != 0 {
		t.Errorf("progress %+v, want all %d listed and none but the writes held when the CRD went (at most %d) counted", p, n, maxHeld)
	}
	if writes > n {
		t.Errorf("%d writes for %d objects: deleted objects were retried", writes, n)
	}
	framework.Scenario{Name: "CRD deleted after the last list", Objects: n, Writes: writes, Retries: s.retries(t, r), Verified: !t.Failed()}.Report(t)
}

func (s *suite) crdDeletedBeforeListEnds(t *testing.T) {
	r := framework.Resource{Group: "gone-early.example.com", Plural: "earlybirds", Kind: "Earlybird"}
	// Three chunks: the first is held, the second is being listed as it
	// is, and the third list at the latest finds no resource.
	const n = 2*chunkSize + 50
	m, writes := s.deleteCRDMidMigration(t, r, "crd-gone-early", n)
	expectResourceNotFound(t, m)
	p := m.Status.Progress
	if p.Listed == 0 || p.Listed >= n || p.Listed%chunkSize != 0 || p.Skipped() > maxHeld || p.Migrated() != 0 || p.Failed != 0 {
		t.Errorf("progress %+v, want whole chunks, not all %d objects, listed, and none but the writes held when the CRD went (at most %d) counted", p, n, maxHeld)
	}
	if writes > int(p.Listed) {
		t.Errorf("%d writes for %d objects listed: deleted objects were retried", writes, p.Listed)
	}
	framework.Scenario{Name: "CRD deleted before the list ends", Objects: n, Writes: writes, Retries: s.retries(t, r), Verified: !t.Failed()}.Report(t)
}

// expectResourceNotFound checks that m failed because its resource is no
// longer served, with the server's message.
func expectResourceNotFound(t *testing.T, m *migrationv1alpha1.StorageVersionMigration) {
	t.Helper()
	failed := framework.Condition(m, migrationv1alpha1.MigrationFailed)
	if failed.Status != "True" || failed.Reason != "ResourceNotFound" || !strings.Contains(failed.Message, "could not find the requested resource") {
		t.Fatalf("conditions %+v, want Failed with ResourceNotFound and the server's message", m.Status.Conditions)
	}
}

// deleteCRDMidMigration creates r with n objects, migrates it with the
// controller, and deletes its CRD while the first chunk's writes are held
// by a webhook. It returns the finished migration and the writes svm sent,
// having checked that nothing of r is left in etcd and that svm sends no
// more requests for r once the migration ended.
func (s *suite) deleteCRDMidMigration(t *testing.T, r framework.Resource, name string, n int) (*migrationv1alpha1.StorageVersionMigration, int) {
	t.Helper()
	env := s.env
	ctx := framework.Context(t, 3*time.Minute)
	env.CreateResource(t, r)
	env.CreateObjects(t, r, []string{"badinput-" + r.Plural}, n)

	gate := make(chan struct{})
	var release sync.Once
	open := func() { release.Do(func() { close(gate) }) }
	t.Cleanup(open)
	hook := framework.StartAdmissionWebhook(t, env, framework.AdmissionHook{
		Resource: r, TimeoutSeconds: 30, FailurePolicy: admissionregistrationv1.Ignore,
		Review: func(ctx context.Context, _ *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			select {
			case <-gate:
			case <-ctx.Done():
			}
			return &admissionv1.AdmissionResponse{Allowed: true}
		},
	})
	s.env.CreateMigration(t, name, r.GVR("v1"))
	if !framework.WaitFor(ctx, time.Minute, func() bool { return hook.TotalCalls() > 0 }) {
		t.Fatal("svm never wrote an object")
	}

	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: r.CRDName()}}
	if err := env.Client.Delete(ctx, crd); err != nil {
		t.Fatalf("delete CRD: %v", err)
	}
	gone := framework.WaitFor(ctx, time.Minute, func() bool {
		err := env.Client.Get(ctx, client.ObjectKeyFromObject(crd), crd)
		_, lerr := env.Dynamic.Resource(r.GVR("v1")).List(ctx, metav1.ListOptions{Limit: 1})
		return apierrors.IsNotFound(err) && apierrors.IsNotFound(lerr)
	})
	if !gone {
		t.Fatalf("CRD %s still served a minute after its deletion", r.CRDName())
	}
	open()
	m := s.env.WaitMigration(t, name, time.Minute, "finished", framework.Finished)
	s.expectSettled(t, name)
	// svm's own counts: the API server counts no request for a resource
	// it no longer serves.
	const requests = "storage_migrator_core_migrator_requests_total"
	lists := s.controllerMetric(t, requests, r, "verb", "list")
	time.Sleep(time.Second)
	if after := s.controllerMetric(t, requests, r, "verb", "list"); after != lists {
		t.Errorf("svm listed %s %d more times after the migration ended", r.Plural, after-lists)
	}
	if reasons := framework.EventReasons(env.Events(t, "StorageVersionMigration", name)); reasons["Stopped"] != 0 {
		t.Errorf("events %v: the controller took the resource's 404 for its migration's deletion", reasons)
	}
	// A 404 is final: for an object deleted, and for a resource no
	// longer served.
	if retries := s.retries(t, r); retries != 0 {
		t.Errorf("%d requests for %s retried", retries, r.Plural)
	}
	if left := env.RawValues(t, r.EtcdPrefix()); len(left) != 0 {
		t.Errorf("%d objects of the deleted CRD left in etcd", len(left))
	}
	return m, s.controllerMetric(t, requests, r, "verb", "update") + s.controllerMetric(t, requests, r, "verb", "patch")
}

// namespaceDeleted deletes a namespace between two chunks. The list goes on
// from its snapshot, so the namespace's objects still come in the next
// chunk; the first write answers 404, and svm counts them all as skipped:
// they no longer exist, so nothing is left in an old version. That 404
// starts svm's watch for others' writes, which tells it of the other
// deletions: those it need not even try. The migration
// succeeds, and the other namespaces' objects are rewritten and unchanged.
// It runs the engine directly, whose chunk callback places the deletion
// exactly between two chunks; the controller and `svm migrate` run the
// same engine.
func (s *suite) namespaceDeleted(t *testing.T) {
	env := s.env
	r := framework.Resource{Group: "nsgone.example.com", Plural: "nsgadgets", Kind: "NsGadget"}
	// Objects are listed in key order, namespace first: one chunk per
	// namespace, and the doomed one in the middle.
	namespaces := []string{"badinput-ns-a", "badinput-ns-b", "badinput-ns-c"}
	doomed := namespaces[1]
	const n, chunk = 150, 50
	env.CreateResource(t, r)
	env.CreateObjects(t, r, namespaces, n)
	env.FlipStorage(t, r)
	before := env.TakeSnapshot(t, r.GVR("v1"))

	retries := &retryCounter{}
	m, requests := framework.NewMigrator(t, env.Config, migrator.Options{ChunkSize: chunk, Observer: retries})
	chunks := 0
	res, err := m.Run(framework.Context(t, 2*time.Minute), migrator.Request{
		Resource: r.GVR("v1"),
		OnChunk: func(context.Context, migrator.State) error {
			if chunks++; chunks == 1 {
				deleteNamespace(t, env, doomed, r.GVR("v1"))
			}
			return nil
		},
	})
	if err != nil {
		t.Fatalf("migration: %v", err)
	}
	p := res.Progress
	if p.Listed != n || p.Migrated() != n-n/3 || p.Skipped() != n/3 || p.Failed != 0 {
		t.Errorf("progress %+v, want %d listed, %d rewritten and the deleted namespace's %d skipped", p, n, n-n/3, n/3)
	}
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": n - n/3})
	var deleted []string
	for key := range before {
		if strings.HasPrefix(key, doomed+"/") {
			deleted = append(deleted, key)
		}
	}
	if diff := before.Without(deleted...).Diff(env.TakeSnapshot(t, r.GVR("v1"))); diff != "" {
		t.Errorf("the other namespaces' objects changed (-before +after):\n%s", diff)
	}
	// One write per listed object, but for the deleted objects svm knew
	// of before writing them.
	writes := requests.Count("PATCH")
	if writes != n-int(p.SkippedWithoutWrite) || p.SkippedWithoutWrite >= n/3 {
		t.Errorf("%d writes, %d objects skipped without one: want one write per listed object (%d) but those, and at least one 404", writes, p.SkippedWithoutWrite, n)
	}
	framework.Scenario{Name: "namespace deleted mid-migration", Objects: n, Writes: writes, Retries: int(retries.n.Load()), Verified: !t.Failed()}.Report(t)
}

// deleteNamespace deletes namespace as kube-controller-manager would, which
// does not run here: delete it, delete its objects (only objects of gvr
// live in it), then finalize it.
func deleteNamespace(t *testing.T, env *framework.Env, namespace string, gvr schema.GroupVersionResource) {
	t.Helper()
	ctx := framework.Context(t, time.Minute)
	namespaces := env.Kube.CoreV1().Namespaces()
	if err := namespaces.Delete(ctx, namespace, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete namespace %s: %v", namespace, err)
	}
	if err := env.Dynamic.Resource(gvr).Namespace(namespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatalf("delete the objects of namespace %s: %v", namespace, err)
	}
	ns, err := namespaces.Get(ctx, namespace, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Spec.Finalizers = nil
	if _, err := namespaces.Finalize(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("finalize namespace %s: %v", namespace, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := namespaces.Get(ctx, namespace, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("namespace %s not gone: %v", namespace, err)
	}
}

// objectsBeingDeleted migrates objects that carry a finalizer, half of them
// deleted (a deletionTimestamp set, waiting for the finalizer). An update
// that keeps the finalizers is allowed on them, and svm's empty write
// touches neither metadata.finalizers nor metadata.deletionTimestamp: every
// object is rewritten, none is removed or blocked, and once their
// finalizers are released the deleted ones go away as they would have.
func (s *suite) objectsBeingDeleted(t *testing.T) {
	env := s.env
	ctx := framework.Context(t, 3*time.Minute)
	r := framework.Resource{Group: "final.example.com", Plural: "finalgadgets", Kind: "FinalGadget"}
	const ns, n, finalizer = "badinput-final", 40, "example.com/hold"
	env.CreateResource(t, r)
	env.CreateNamespace(t, ns)
	objects := env.Dynamic.Resource(r.GVR("v1")).Namespace(ns)
	var deleting []string
	for i := range n {
		obj := r.Object("v1", fmt.Sprintf("obj-%05d", i), i)
		if i%4 != 3 {
			obj.SetFinalizers([]string{finalizer})
		}
		if _, err := objects.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if err := objects.Delete(ctx, obj.GetName(), metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			deleting = append(deleting, obj.GetName())
		}
	}
	env.FlipStorage(t, r)
	before := env.TakeSnapshot(t, r.GVR("v1"))
	for _, name := range deleting {
		if obj := before[ns+"/"+name]; obj == nil || obj["metadata"].(map[string]any)["deletionTimestamp"] == nil {
			t.Fatalf("%s is not being deleted: %v", name, obj)
		}
	}

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.CP.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	updates := env.ServerWrites(t, r.Plural)
	code, stdout, stderr := framework.RunSVM(t, kubeconfig, 2*time.Minute, "migrate", r.CRDName())
	if code != 0 {
		t.Fatalf("svm migrate exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if want := fmt.Sprintf("%s: done: %d listed: migrated %d (re-stored %d, already current 0), written since the start 0, gone 0, failed 0 in ", r.CRDName(), n, n, n); !strings.Contains(stdout, want) {
		t.Errorf("summary lacks %q:\n%s", want, stdout)
	}
	writes := env.ServerWrites(t, r.Plural) - updates
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": n})
	// deletionTimestamp, deletionGracePeriodSeconds and finalizers are part
	// of the snapshot: unchanged.
	env.ExpectUnchanged(t, r.GVR("v1"), before)

	// Nothing of svm's holds them: released, they go.
	for _, name := range deleting {
		if _, err := objects.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
			t.Fatalf("release %s: %v", name, err)
		}
	}
	if left := len(env.RawValues(t, r.EtcdPrefix())); left != n-len(deleting) {
		t.Errorf("%d objects in etcd after releasing the %d being deleted, want %d", left, len(deleting), n-len(deleting))
	}
	framework.Scenario{Name: "objects being deleted, with finalizers", Objects: n, Writes: writes, Retries: writes - n, Verified: !t.Failed()}.Report(t)
}

// retryCounter counts the requests the engine repeated after a transient
// error.
type retryCounter struct {
	migrator.NopObserver
	n atomic.Int64
}

func (c *retryCounter) Retry(schema.GroupResource, error) { c.n.Add(1) }
