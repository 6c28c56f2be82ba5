package bench

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"

	"github.com/svm-project/svm/test/framework"
)

// writeRequest sends one request that makes the API server re-encode obj,
// listed with its metadata (full, when the request needs the whole object).
type writeRequest struct {
	name string
	// full: the request carries the whole object, so the list must too.
	full  bool
	write func(ctx context.Context, md metadata.Getter, dyn dynamic.NamespaceableResourceInterface, obj *unstructured.Unstructured) error
	// preconditioned: the request fails with 409 when another client
	// wrote the object since it was listed, so a writer is seen and never
	// clobbered (a request without it re-encodes the writer's version,
	// which is safe, but costs a write the writer already paid for).
	preconditioned bool
}

var fieldManager = metav1.PatchOptions{FieldManager: "storage-version-migrator", FieldValidation: metav1.FieldValidationIgnore}

func patchWith(pt types.PatchType, body func(obj *unstructured.Unstructured) []byte) func(context.Context, metadata.Getter, dynamic.NamespaceableResourceInterface, *unstructured.Unstructured) error {
	return func(ctx context.Context, md metadata.Getter, _ dynamic.NamespaceableResourceInterface, obj *unstructured.Unstructured) error {
		_, err := md.Namespace(obj.GetNamespace()).Patch(ctx, obj.GetName(), pt, body(obj), fieldManager)
		return err
	}
}

// svmPatch is the body of svm's write (and of its managedFields moves,
// with the new list): obj's uid and resourceVersion.
func svmPatch(obj *unstructured.Unstructured) []byte {
	return fmt.Appendf(nil, `{"metadata":{"uid":%q,"resourceVersion":%q}}`, obj.GetUID(), obj.GetResourceVersion())
}

// writeRequests are the requests that re-encode an object without changing
// it, or claim to.
var writeRequests = []writeRequest{
	{name: "merge patch, uid and resourceVersion (svm)", preconditioned: true, write: patchWith(types.MergePatchType, svmPatch)},
	{name: "merge patch, uid and resourceVersion, the whole object answered", preconditioned: true, write: func(ctx context.Context, _ metadata.Getter, dyn dynamic.NamespaceableResourceInterface, obj *unstructured.Unstructured) error {
		_, err := dyn.Namespace(obj.GetNamespace()).Patch(ctx, obj.GetName(), types.MergePatchType, svmPatch(obj), fieldManager)
		return err
	}},
	{name: "empty merge patch", write: patchWith(types.MergePatchType, func(*unstructured.Unstructured) []byte { return []byte(`{}`) })},
	{name: "JSON patch testing the resourceVersion", preconditioned: true, write: patchWith(types.JSONPatchType, func(obj *unstructured.Unstructured) []byte {
		return fmt.Appendf(nil, `[{"op":"test","path":"/metadata/resourceVersion","value":%q}]`, obj.GetResourceVersion())
	})},
	{name: "apply with no fields", write: func(ctx context.Context, md metadata.Getter, _ dynamic.NamespaceableResourceInterface, obj *unstructured.Unstructured) error {
		body := fmt.Appendf(nil, `{"apiVersion":%q,"kind":%q,"metadata":{"name":%q,"namespace":%q}}`, obj.GetAPIVersion(), obj.GetKind(), obj.GetName(), obj.GetNamespace())
		force := true
		_, err := md.Namespace(obj.GetNamespace()).Patch(ctx, obj.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "storage-version-migrator", Force: &force})
		return err
	}},
	{name: "update carrying the object as listed", full: true, preconditioned: true, write: func(ctx context.Context, _ metadata.Getter, dyn dynamic.NamespaceableResourceInterface, obj *unstructured.Unstructured) error {
		_, err := dyn.Namespace(obj.GetNamespace()).Update(ctx, obj, metav1.UpdateOptions{FieldManager: "storage-version-migrator"})
		return err
	}},
}

// BenchmarkWriteRequests measures, on the real API server, each request
// that makes it re-encode a custom resource without changing it: the API
// server's CPU and the bytes etcd receives per object, the rate at
// SVM_BENCH_WRITES_IN_FLIGHT requests in flight (default 32), and whether
// the objects' content (managedFields included) is what it was. Each pass
// flips the storage version first, so every request stores new bytes. The
// requests take turns within each round, in reverse order every other
// round (inTurn), so that neither a machine whose speed drifts nor the
// direction of the flip favours one. A strategic merge patch is not
// listed: the API server refuses it for custom resources (415).
// SVM_BENCH_OBJECTS sets the number of objects (default 5000),
// SVM_BENCH_ROUNDS the rounds (default 3), SVM_BENCH_ONLY the requests.
func BenchmarkWriteRequests(b *testing.B) {
	n := envInt("SVM_BENCH_OBJECTS", 5000)
	rounds := envInt("SVM_BENCH_ROUNDS", 3)
	requests := onlyNamed(b, writeRequests, func(w writeRequest) string { return w.name })
	env, pid, meter, cfg := widgetsBench(b, n)
	p := &writePasses{env: env, pid: pid, meter: meter, n: n, stored: "v1", inFlight: envInt("SVM_BENCH_WRITES_IN_FLIGHT", 32),
		md: metadata.NewForConfigOrDie(cfg).Resource(framework.Widgets), dyn: dynamic.NewForConfigOrDie(cfg).Resource(framework.Widgets)}
	// The first pass after the objects were made is the slowest of any:
	// one unmeasured pass warms the server up.
	p.pass(b, writeRequests[0])
	totals := make([]writeTotals, len(requests))
	for range b.N {
		for round := range rounds {
			for _, i := range inTurn(len(requests), round) {
				r := p.pass(b, requests[i])
				b.Logf("round %d, to %s: %-45s %4.0f objects/s  %.2f server CPU ms/object", round+1, p.stored, requests[i].name, r.objects/r.wall.Seconds(), float64(r.cpu.Microseconds())/1000/r.objects)
				totals[i].add(r)
			}
		}
	}
	b.Logf("%d objects, %d rounds, %d requests in flight; per object, over all rounds:", n, rounds*b.N, p.inFlight)
	for i, w := range requests {
		t := totals[i]
		b.Logf("| %s | %.0f objects/s | %.2f server CPU ms | %.0f etcd bytes | preconditioned %t | content %s |",
			w.name, t.objects/t.wall.Seconds(), float64(t.cpu.Microseconds())/1000/t.objects, t.etcdBytes/t.objects, w.preconditioned, t.content())
	}
}

// writePasses runs passes of one write request over every widget.
type writePasses struct {
	env    *framework.Env
	pid    int
	meter  *cpuMeter
	n      int
	stored string
	md     metadata.Getter
	dyn    dynamic.NamespaceableResourceInterface
	// inFlight is how many requests are sent at a time.
	inFlight int
}

// writeTotals adds up a request's passes.
type writeTotals struct {
	objects, etcdBytes float64
	cpu, wall          time.Duration
	changed            string
}

func (t *writeTotals) add(r writeTotals) {
	t.objects += r.objects
	t.etcdBytes += r.etcdBytes
	t.cpu += r.cpu
	t.wall += r.wall
	if t.changed == "" {
		t.changed = r.changed
	}
}

func (t *writeTotals) content() string {
	if t.changed == "" {
		return "unchanged"
	}
	return "CHANGED: " + strings.SplitN(t.changed, "\n", 2)[0]
}

// pass flips the storage version, sends w for every widget, and checks
// etcd and the objects' content.
func (p *writePasses) pass(b *testing.B, w writeRequest) writeTotals {
	b.Helper()
	before := p.env.TakeSnapshot(b, framework.Widgets)
	target := map[string]string{"v1": "v2", "v2": "v1"}[p.stored]
	flipWidgetsStorage(b, p.env, target)
	p.stored = target
	if _, err := settle(p.pid, settleLimit); err != nil {
		b.Fatal(err)
	}
	received := etcdReceived(b, p.env.CP.EtcdURL)
	if err := p.meter.start(); err != nil {
		b.Fatal(err)
	}
	if err := rewriteEach(b.Context(), p.md, p.dyn, w, p.inFlight); err != nil {
		b.Fatal(err)
	}
	r := writeTotals{objects: float64(p.n), wall: time.Since(p.meter.startWall)}
	if _, err := settle(p.pid, settleLimit); err != nil {
		b.Fatal(err)
	}
	cpu, err := p.meter.stop()
	if err != nil {
		b.Fatal(err)
	}
	r.cpu = cpu
	r.etcdBytes = etcdReceived(b, p.env.CP.EtcdURL) - received
	if got := p.env.StoredVersions(b, framework.EtcdPrefix(framework.Widgets.GroupResource())); got["example.com/"+target] != p.n {
		b.Fatalf("after %s: stored %v, want all %d in %s", w.name, got, p.n, target)
	}
	r.changed = before.Diff(p.env.TakeSnapshot(b, framework.Widgets))
	return r
}

// rewriteEach lists the widgets in chunks of 500 (metadata only, unless w
// needs the whole object) and sends w for each, inFlight at a time.
func rewriteEach(ctx context.Context, md metadata.Getter, dyn dynamic.NamespaceableResourceInterface, w writeRequest, inFlight int) error {
	token := ""
	for {
		var items []unstructured.Unstructured
		if w.full {
			list, err := dyn.List(ctx, metav1.ListOptions{Limit: 500, Continue: token})
			if err != nil {
				return err
			}
			items, token = list.Items, list.GetContinue()
		} else {
			list, err := md.List(ctx, metav1.ListOptions{Limit: 500, Continue: token})
			if err != nil {
				return err
			}
			for i := range list.Items {
				m := &list.Items[i]
				u := unstructured.Unstructured{}
				u.SetAPIVersion(framework.Widgets.GroupVersion().String())
				u.SetKind("Widget")
				u.SetNamespace(m.Namespace)
				u.SetName(m.Name)
				u.SetUID(m.UID)
				u.SetResourceVersion(m.ResourceVersion)
				items = append(items, u)
			}
			token = list.Continue
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(inFlight)
		for i := range items {
			obj := &items[i]
			g.Go(func() error {
				err := w.write(gctx, md, dyn, obj)
				if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
					return nil
				}
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return err
		}
		if token == "" {
			return nil
		}
	}
}

// etcdReceived is the bytes etcd has received from its gRPC clients (the
// API server), from its metrics.
func etcdReceived(b *testing.B, etcdURL string) float64 {
	b.Helper()
	resp, err := http.Get(etcdURL + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var total float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "etcd_network_client_grpc_received_bytes_total") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			b.Fatal(err)
		}
		total += v
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	return total
}
