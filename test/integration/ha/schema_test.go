package ha_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svm-project/svm/internal/migrator"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// crdKeys is where kube-apiserver keeps CRDs in etcd: the connections of
// the lagging server that carry them are the ones held.
const crdKeys = "/registry/apiextensions.k8s.io/customresourcedefinitions/"

// The field the new schema adds, and the value written to it.
const (
	newField = "owner"
	newValue = "written-through-the-up-to-date-server"
)

// schemaLag is two API servers on one etcd, A up to date and B holding
// the CRDs as they were when Hold was called: B keeps serving custom
// resources, decoding them with the schemas it has, and so prunes the
// fields the new schemas added.
type schemaLag struct {
	env   *framework.Env
	proxy *framework.EtcdProxy
	// a and b are the servers' URLs; cfg is the admin's configuration,
	// unthrottled.
	a, b string
	cfg  *rest.Config
}

func startSchemaLag(t *testing.T) *schemaLag {
	t.Helper()
	env := framework.Start(t, controlplane.Options{})
	proxy := framework.StartEtcdProxy(t, env.CP.EtcdURL, crdKeys)
	peer, err := env.CP.StartPeer(framework.Context(t, 3*time.Minute), "apiserver-b", "--etcd-servers="+proxy.URL)
	if err != nil {
		t.Fatalf("start the second API server: %v", err)
	}
	t.Cleanup(func() {
		proxy.Release()
		_ = peer.Stop()
	})
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS = -1
	// A write through the lagging server warns of the field it drops.
	cfg.WarningHandler = rest.NoWarnings{}
	return &schemaLag{env: env, proxy: proxy, a: env.Config.Host, b: peer.URL, cfg: cfg}
}

// via is the admin's configuration with reads sent to the server named
// listedBy ("A" or "B") and writes to writtenBy.
func (l *schemaLag) via(t *testing.T, listedBy, writtenBy string) *rest.Config {
	t.Helper()
	url := map[string]string{"A": l.a, "B": l.b}
	return framework.Split(t, l.cfg, url[listedBy], url[writtenBy])
}

// createCRD creates r's CRD, served and stored in v1 with a structural
// schema that prunes unknown fields of spec, and waits until both
// servers serve it.
func (l *schemaLag) createCRD(t *testing.T, r framework.Resource) {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: r.CRDName()},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: r.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: r.Plural, Singular: strings.ToLower(r.Kind), Kind: r.Kind, ListKind: r.Kind + "List"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"size":  {Type: "integer"},
							"color": {Type: "string"},
							"tags":  {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string"}}},
						}},
						"data": {Type: "object", XPreserveUnknownFields: ptr(true)},
					},
				}},
			}},
		},
	}
	if err := l.env.Client.Create(framework.Context(t, time.Minute), crd); err != nil {
		t.Fatalf("create CRD %s: %v", r.CRDName(), err)
	}
	l.env.WaitEstablished(t, r.CRDName())
	served := metadata.NewForConfigOrDie(l.via(t, "B", "B")).Resource(r.GVR("v1"))
	err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := served.List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("the second server does not serve %s: %v", r.CRDName(), err)
	}
}

// addField adds newField to the spec of r's schema, through A.
func (l *schemaLag) addField(t *testing.T, r framework.Resource) {
	t.Helper()
	ctx := framework.Context(t, time.Minute)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := l.env.Client.Get(ctx, client.ObjectKey{Name: r.CRDName()}, crd); err != nil {
			return err
		}
		crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties[newField] = apiextensionsv1.JSONSchemaProps{Type: "string"}
		return l.env.Client.Update(ctx, crd)
	})
	if err != nil {
		t.Fatalf("add %s to the schema of %s: %v", newField, r.CRDName(), err)
	}
}

// writeField sets newField on every object of r in ns through A, each
// write repeated until A keeps the field (A learns of its new schema a
// moment after the CRD changed).
func (l *schemaLag) writeField(t *testing.T, r framework.Resource, ns string, n int) {
	t.Helper()
	c := dynamic.NewForConfigOrDie(l.via(t, "A", "A")).Resource(r.GVR("v1")).Namespace(ns)
	patch := fmt.Appendf(nil, `{"spec":{%q:%q}}`, newField, newValue)
	g, ctx := errgroup.WithContext(framework.Context(t, 2*time.Minute))
	g.SetLimit(8)
	for i := range n {
		g.Go(func() error {
			return wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
				got, err := c.Patch(ctx, objectName(i), types.MergePatchType, patch, metav1.PatchOptions{})
				if err != nil {
					return false, err
				}
				v, _, _ := unstructured.NestedString(got.Object, "spec", newField)
				return v == newValue, nil
			})
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("write %s on %s in %s through the up-to-date server: %v", newField, r.Plural, ns, err)
	}
}

// expectBLags fails the test unless B still serves r without newField:
// otherwise nothing below shows what a lagging server does.
func (l *schemaLag) expectBLags(t *testing.T, r framework.Resource, ns string) {
	t.Helper()
	got, err := dynamic.NewForConfigOrDie(l.via(t, "B", "B")).Resource(r.GVR("v1")).Namespace(ns).Get(framework.Context(t, time.Minute), objectName(0), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get through the lagging server: %v", err)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(got.Object, "spec", newField); found {
		t.Fatalf("the second server serves %s with %s: it has seen the new schema, and the test proves nothing", r.Plural, newField)
	}
}

// withField counts the objects of r stored in etcd under ns, and those
// of them whose raw value holds newField.
func (l *schemaLag) withField(t *testing.T, r framework.Resource, ns string) (objects, with int) {
	t.Helper()
	for key, raw := range l.env.RawValues(t, r.EtcdPrefix()+ns+"/") {
		var obj struct {
			Spec map[string]any `json:"spec"`
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			t.Fatalf("etcd value %s: %v", key, err)
		}
		objects++
		if obj.Spec[newField] == newValue {
			with++
		}
	}
	return objects, with
}

func objectName(i int) string { return fmt.Sprintf("obj-%03d", i) }

func ptr[T any](v T) *T { return &v }

// rewriteCase is one way to write every object of a namespace back,
// listed through one server and written through another.
type rewriteCase struct {
	name                string
	listedBy, writtenBy string
	rewrite             func(ctx context.Context, cfg *rest.Config, gvr schema.GroupVersionResource, ns string) error
	// lost: every object loses newField; otherwise none does.
	lost bool
}

var rewriteCases = []rewriteCase{
	{"update as listed", "A", "A", updateAsListed, false},
	{"update as listed", "B", "A", updateAsListed, true},
	{"update as listed", "A", "B", updateAsListed, true},
	{"update as listed", "B", "B", updateAsListed, true},
	{"merge patch of uid and resourceVersion", "B", "A", patchEach(types.MergePatchType, uidAndResourceVersion), false},
	{"merge patch of uid and resourceVersion", "B", "B", patchEach(types.MergePatchType, uidAndResourceVersion), true},
	{"JSON patch testing the resourceVersion", "B", "A", patchEach(types.JSONPatchType, testResourceVersion), false},
	{"apply with no fields", "B", "A", patchEach(types.ApplyPatchType, noFields("lag.example.com/v1", "Gadget")), false},
}

// TestFieldAddedWhileOneServerLags adds a field to a CRD's schema while
// one of two API servers still holds the old schema (its etcd connections
// for CRDs are held), writes the field on every object through the
// up-to-date server, then writes each object back with every request
// that re-encodes an object, listed through one server and written
// through another, and counts in etcd the objects that lost the field.
// Last, svm's engine migrates objects listed through the lagging server:
// written through the up-to-date one, it must lose nothing and change
// nothing; written through the lagging one, every object loses the field,
// as it does to any client's write there.
func TestFieldAddedWhileOneServerLags(t *testing.T) {
	t.Parallel()
	const n = 50
	l := startSchemaLag(t)
	gadgets := framework.Resource{Group: "lag.example.com", Plural: "gadgets", Kind: "Gadget"}
	// svm's engine migrates a whole resource: one for each way.
	gizmos := framework.Resource{Group: "lag.example.com", Plural: "gizmos", Kind: "Gizmo"}
	sprockets := framework.Resource{Group: "lag.example.com", Plural: "sprockets", Kind: "Sprocket"}
	resources := []framework.Resource{gadgets, gizmos, sprockets}
	namespaces := map[string]framework.Resource{"svm-a": gizmos, "svm-b": sprockets}
	for i := range rewriteCases {
		namespaces[fmt.Sprintf("case-%d", i)] = gadgets
	}
	for _, r := range resources {
		l.createCRD(t, r)
	}
	for ns, r := range namespaces {
		l.env.CreateNamespace(t, ns)
		l.createObjects(t, r, ns, n)
	}

	l.proxy.Hold()
	for _, r := range resources {
		l.addField(t, r)
	}
	for ns, r := range namespaces {
		l.writeField(t, r, ns, n)
		if objects, with := l.withField(t, r, ns); objects != n || with != n {
			t.Fatalf("%s: %d of %d objects stored with %s, want all %d", ns, with, objects, newField, n)
		}
	}
	for ns, r := range namespaces {
		l.expectBLags(t, r, ns)
	}

	for i, c := range rewriteCases {
		l.runCase(t, c, gadgets, fmt.Sprintf("case-%d", i), n)
	}
	l.runSVM(t, gizmos, "svm-a", "A", n)
	l.runSVM(t, sprockets, "svm-b", "B", n)
}

// createObjects creates n objects of r in ns, through A.
func (l *schemaLag) createObjects(t *testing.T, r framework.Resource, ns string, n int) {
	t.Helper()
	c := dynamic.NewForConfigOrDie(l.cfg).Resource(r.GVR("v1")).Namespace(ns)
	g, ctx := errgroup.WithContext(framework.Context(t, 2*time.Minute))
	g.SetLimit(8)
	for i := range n {
		g.Go(func() error {
			_, err := c.Create(ctx, r.Object("v1", objectName(i), i), metav1.CreateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("create %s in %s: %v", r.Plural, ns, err)
	}
}

// runCase writes every object of ns back as c says and checks how many
// lost the field.
func (l *schemaLag) runCase(t *testing.T, c rewriteCase, r framework.Resource, ns string, n int) {
	t.Helper()
	if err := c.rewrite(framework.Context(t, 2*time.Minute), l.via(t, c.listedBy, c.writtenBy), r.GVR("v1"), ns); err != nil {
		t.Errorf("%s, listed through %s, written through %s: %v", c.name, c.listedBy, c.writtenBy, err)
		return
	}
	objects, with := l.withField(t, r, ns)
	lost := objects - with
	t.Logf("| %s | %s | %s | %d of %d |", c.name, c.listedBy, c.writtenBy, lost, objects)
	want := 0
	if c.lost {
		want = objects
	}
	if objects != n || lost != want {
		t.Errorf("%s, listed through %s, written through %s: %d of %d objects lost %s, want %d", c.name, c.listedBy, c.writtenBy, lost, objects, newField, want)
	}
}

// runSVM migrates r, whose objects are all in ns, with svm's engine,
// listing through the lagging server and writing through the one named
// writtenBy. Written through the up-to-date server, every object must
// keep newField and its whole content; written through the lagging one,
// every object loses newField, which that server prunes from any write.
func (l *schemaLag) runSVM(t *testing.T, r framework.Resource, ns, writtenBy string, n int) {
	t.Helper()
	before := l.env.TakeSnapshot(t, r.GVR("v1"))
	m, _ := framework.NewMigrator(t, l.via(t, "B", writtenBy), migrator.Options{})
	res, err := m.Run(framework.Context(t, 2*time.Minute), migrator.Request{Resource: r.GVR("v1")})
	if err != nil {
		t.Fatalf("svm's migration: %v", err)
	}
	objects, with := l.withField(t, r, ns)
	t.Logf("| svm's engine (%s) | B | %s | %d of %d |", res.Progress.Outcomes(), writtenBy, objects-with, objects)
	if res.Progress.Migrated() != int64(n) || objects != n {
		t.Errorf("svm's migration: %s, %d objects stored; want all %d migrated", res.Progress.Outcomes(), objects, n)
	}
	if writtenBy == "B" {
		if with != 0 {
			t.Errorf("svm's migration written through the lagging server: %d of %d objects kept %s; that server prunes it from every write", with, objects, newField)
		}
		return
	}
	if with != n {
		t.Errorf("svm's migration, listed through the lagging server: %d of %d objects lost %s, want none", objects-with, objects, newField)
	}
	l.env.ExpectUnchanged(t, r.GVR("v1"), before)
}

func updateAsListed(ctx context.Context, cfg *rest.Config, gvr schema.GroupVersionResource, ns string) error {
	c := dynamic.NewForConfigOrDie(cfg).Resource(gvr).Namespace(ns)
	list, err := c.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range list.Items {
		g.Go(func() error {
			_, err := c.Update(ctx, &list.Items[i], metav1.UpdateOptions{FieldManager: migrator.DefaultFieldManager})
			return err
		})
	}
	return g.Wait()
}

// patchEach lists ns's metadata and sends each object the patch body
// makes of it.
func patchEach(pt types.PatchType, body func(m *metav1.PartialObjectMetadata) []byte) func(context.Context, *rest.Config, schema.GroupVersionResource, string) error {
	return func(ctx context.Context, cfg *rest.Config, gvr schema.GroupVersionResource, ns string) error {
		c := metadata.NewForConfigOrDie(cfg).Resource(gvr).Namespace(ns)
		list, err := c.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		opts := metav1.PatchOptions{FieldManager: migrator.DefaultFieldManager}
		if pt == types.ApplyPatchType {
			opts.Force = ptr(true)
		}
		g, ctx := errgroup.WithContext(ctx)
		g.SetLimit(8)
		for i := range list.Items {
			m := &list.Items[i]
			g.Go(func() error {
				_, err := c.Patch(ctx, m.Name, pt, body(m), opts)
				return err
			})
		}
		return g.Wait()
	}
}

func uidAndResourceVersion(m *metav1.PartialObjectMetadata) []byte {
	return fmt.Appendf(nil, `{"metadata":{"uid":%q,"resourceVersion":%q}}`, m.UID, m.ResourceVersion)
}

func testResourceVersion(m *metav1.PartialObjectMetadata) []byte {
	return fmt.Appendf(nil, `[{"op":"test","path":"/metadata/resourceVersion","value":%q}]`, m.ResourceVersion)
}

// noFields is a server-side apply of an object of kind that names no
// field: it owns nothing.
func noFields(apiVersion, kind string) func(m *metav1.PartialObjectMetadata) []byte {
	return func(m *metav1.PartialObjectMetadata) []byte {
		return fmt.Appendf(nil, `{"apiVersion":%q,"kind":%q,"metadata":{"name":%q,"namespace":%q}}`, apiVersion, kind, m.Name, m.Namespace)
	}
}
