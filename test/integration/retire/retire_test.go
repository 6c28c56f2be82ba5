// Package retire_test retires API versions end to end on a real control
// plane: `svm retire` and pkg/migrate's Retire, checked in etcd's raw
// values and by what server-side apply can still do once a version is
// removed.
package retire_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svm-project/svm/pkg/migrate"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

// The three managers of every object: two appliers and an updater.
const (
	alice = "alice" // applies spec.color
	bob   = "bob"   // applies spec.size
	carol = "carol" // updates a label
)

// appliedObjects creates n objects of r in namespace ns through v1 as
// server-side apply users do: alice and bob apply a field each, carol
// updates a label. Every managedFields entry then names v1.
func appliedObjects(t *testing.T, env *framework.Env, r framework.Resource, ns string, n int) {
	t.Helper()
	env.CreateNamespace(t, ns)
	ctx := framework.Context(t, 5*time.Minute)
	client := env.Dynamic.Resource(r.GVR("v1")).Namespace(ns)
	for i := range n {
		name := fmt.Sprintf("obj-%03d", i)
		for _, a := range []struct {
			manager string
			spec    map[string]any
		}{{alice, map[string]any{"color": fmt.Sprintf("red-%d", i)}}, {bob, map[string]any{"size": int64(i)}}} {
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": r.Group + "/v1", "kind": r.Kind,
				"metadata": map[string]any{"name": name, "namespace": ns},
				"spec":     a.spec,
			}}
			if _, err := client.Apply(ctx, name, obj, metav1.ApplyOptions{FieldManager: a.manager}); err != nil {
				t.Fatalf("apply %s as %s: %v", name, a.manager, err)
			}
		}
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{"carol":"c-%d"}}}`, i)
		if _, err := client.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: carol}); err != nil {
			t.Fatalf("update %s as %s: %v", name, carol, err)
		}
	}
}

// ownership is what each manager owns in an object, by manager and
// operation (and subresource), without the apiVersion the entry names.
type ownership map[string]string

func ownershipOf(obj *unstructured.Unstructured) ownership {
	out := ownership{}
	for _, e := range obj.GetManagedFields() {
		fields := ""
		if e.FieldsV1 != nil {
			fields = string(e.FieldsV1.Raw)
		}
		out[e.Manager+" "+string(e.Operation)+" "+e.Subresource] = fields
	}
	return out
}

// versionsNamed counts, over objects, the managedFields entries per
// apiVersion.
func versionsNamed(objs []unstructured.Unstructured) map[string]int {
	out := map[string]int{}
	for _, o := range objs {
		for _, e := range o.GetManagedFields() {
			out[e.APIVersion]++
		}
	}
	return out
}

// snapshotWithout is a snapshot of r (read in version) with managedFields
// left out: the content a retirement must not change.
func snapshotWithout(t *testing.T, env *framework.Env, r framework.Resource, version string) (framework.Snapshot, map[string]ownership) {
	t.Helper()
	snap := framework.Snapshot{}
	owners := map[string]ownership{}
	for _, o := range env.List(t, r.GVR(version)) {
		key := o.GetNamespace() + "/" + o.GetName()
		owners[key] = ownershipOf(&o)
		c := o.DeepCopy().Object
		unstructured.RemoveNestedField(c, "metadata", "resourceVersion")
		unstructured.RemoveNestedField(c, "metadata", "managedFields")
		unstructured.RemoveNestedField(c, "apiVersion")
		snap[key] = c
	}
	return snap, owners
}

// removeVersion removes version from the CRD's spec.versions; the API
// server refuses while status.storedVersions lists it.
func removeVersion(t *testing.T, env *framework.Env, crdName, version string) error {
	t.Helper()
	ctx := framework.Context(t, time.Minute)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: crdName}, crd); err != nil {
			return err
		}
		crd.Spec.Versions = slices.DeleteFunc(crd.Spec.Versions, func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == version })
		return env.Client.Update(ctx, crd)
	})
}

// applyAsNewcomer applies spec.shape to every object of r through v2 as a
// manager that has never written them, and returns the errors.
func applyAsNewcomer(t *testing.T, env *framework.Env, r framework.Resource, ns string, n int) []error {
	t.Helper()
	ctx := framework.Context(t, 2*time.Minute)
	var errs []error
	for i := range n {
		name := fmt.Sprintf("obj-%03d", i)
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": r.Group + "/v2", "kind": r.Kind,
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec":     map[string]any{"shape": "round"},
		}}
		if _, err := env.Dynamic.Resource(r.GVR("v2")).Namespace(ns).Apply(ctx, name, obj, metav1.ApplyOptions{FieldManager: "dave"}); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	return errs
}

// writeVerbs are the verbs of apiserver_request_total that write.
var writeVerbs = []string{"POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION"}

// serverWrites is the API server's own count of write requests to the
// resources of group.
func serverWrites(t *testing.T, env *framework.Env, group string) int {
	t.Helper()
	total := 0.0
	for _, v := range writeVerbs {
		total += env.ServerMetric(t, "apiserver_request_total", `group="`+group+`"`, `verb="`+v+`"`)
	}
	return int(total)
}

// TestRetireKeepsServerSideApplyWorking is the reproduction: objects
// written through v1 by server-side apply and an update, storage flipped
// to v2, then v1 retired and removed. A second CRD given only a migration
// and pruning shows the failure the retirement prevents. It also shows
// that a dry run and a second run write nothing, by the API server's count.
func TestRetireKeepsServerSideApplyWorking(t *testing.T) {
	t.Parallel()
	// A control plane of its own: its write counts must be this test's.
	env := framework.Start(t, controlplane.Options{})
	kubeconfig := env.KubeconfigFile(t)
	const n = 30
	ns := "retire"
	r := framework.Resource{Group: "retired.example.com", Plural: "widgets", Kind: "Widget"}
	control := framework.Resource{Group: "migrated.example.com", Plural: "widgets", Kind: "Widget"}
	for _, res := range []framework.Resource{r, control} {
		env.CreateResource(t, res)
		appliedObjects(t, env, res, ns, n)
	}
	before, owners := snapshotWithout(t, env, r, "v2")
	if got := versionsNamed(env.List(t, r.GVR("v2"))); got[r.Group+"/v1"] != 3*n {
		t.Fatalf("managedFields entries before: %v, want %d naming v1", got, 3*n)
	}
	for _, res := range []framework.Resource{r, control} {
		env.SetStorage(t, res, "v2")
	}
	name := "widgets.v1." + r.Group

	t.Run("dry run writes nothing", func(t *testing.T) {
		writes := serverWrites(t, env, r.Group) + serverWrites(t, env, "apiextensions.k8s.io")
		code, out, errOut := framework.RunSVM(t, kubeconfig, 2*time.Minute, "retire", name, "--dry-run", "--crd-drain-margin", framework.TestDrainMargin.String())
		if code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
		}
		for _, want := range []string{
			fmt.Sprintf("%d objects may be stored in it: status.storedVersions [v1 v2] lists v1", n),
			fmt.Sprintf("managedFields: %d of %d objects have entries naming it", n, n),
			env.CP.APIServerURL + ": ",
			"dry run, nothing written: would rewrite",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("dry run does not say %q:\n%s", want, out)
			}
		}
		if after := serverWrites(t, env, r.Group) + serverWrites(t, env, "apiextensions.k8s.io"); after != writes {
			t.Errorf("the dry run wrote: %d writes before, %d after", writes, after)
		}
	})

	code, out, errOut := framework.RunSVM(t, kubeconfig, 3*time.Minute, "retire", name, "--crd-drain-margin", framework.TestDrainMargin.String())
	if code != 0 {
		t.Fatalf("svm retire: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{fmt.Sprintf("managedFields moved off the retired versions on %d objects", n), "storedVersions: pruned to [v2]", "done in "} {
		if !strings.Contains(out, want) {
			t.Errorf("svm retire does not say %q:\n%s", want, out)
		}
	}

	// The control: today's migration and pruning, no more.
	if code, out, errOut := framework.RunSVM(t, kubeconfig, 3*time.Minute, "migrate", "widgets."+control.Group); code != 0 {
		t.Fatalf("svm migrate: exit %d\n%s\n%s", code, out, errOut)
	}
	pruneStoredVersions(t, env, control.CRDName(), "v2")

	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": n})
	if diff := cmp.Diff(map[string]int{r.Group + "/v2": 3 * n}, env.ManagedFieldsVersions(t, r.EtcdPrefix())); diff != "" {
		t.Errorf("etcd: versions managedFields name (-want +got):\n%s", diff)
	}
	if got := env.CRDStoredVersions(t, r.CRDName()); !slices.Equal(got, []string{"v2"}) {
		t.Errorf("storedVersions %v, want [v2]", got)
	}
	after, ownersAfter := snapshotWithout(t, env, r, "v2")
	if diff := before.Diff(after); diff != "" {
		t.Errorf("content changed (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(owners, ownersAfter); diff != "" {
		t.Errorf("ownership changed (-before +after):\n%s", diff)
	}

	t.Run("a second run writes nothing", func(t *testing.T) {
		writes := serverWrites(t, env, r.Group) + serverWrites(t, env, "apiextensions.k8s.io")
		code, out, errOut := framework.RunSVM(t, kubeconfig, 2*time.Minute, "retire", name, "--crd-drain-margin", framework.TestDrainMargin.String())
		if code != 0 || !strings.Contains(out, "nothing to do:") {
			t.Errorf("exit %d, want 0 and \"nothing to do\"\n%s\n%s", code, out, errOut)
		}
		if after := serverWrites(t, env, r.Group) + serverWrites(t, env, "apiextensions.k8s.io"); after != writes {
			t.Errorf("the second run wrote: %d writes before, %d after", writes, after)
		}
	})

	for _, res := range []framework.Resource{r, control} {
		if err := removeVersion(t, env, res.CRDName(), "v1"); err != nil {
			t.Fatalf("remove v1 from %s: %v", res.CRDName(), err)
		}
	}
	// The API server takes up a CRD's change a moment later.
	framework.Eventually(t, "v1 no longer served", time.Minute, func(ctx context.Context) (bool, error) {
		_, err := env.Discovery.ServerResourcesForGroupVersion(r.Group + "/v1")
		_, cerr := env.Discovery.ServerResourcesForGroupVersion(control.Group + "/v1")
		return err != nil && cerr != nil, nil
	})

	if errs := applyAsNewcomer(t, env, r, ns, n); len(errs) > 0 {
		t.Errorf("server-side apply failed on %d of %d retired objects, first: %v", len(errs), n, errs[0])
	}
	errs := applyAsNewcomer(t, env, control, ns, n)
	if len(errs) != n {
		t.Errorf("server-side apply failed on %d of %d objects only migrated and pruned, want all", len(errs), n)
	} else if !strings.Contains(errs[0].Error(), "invalid group/version") {
		t.Errorf("the control failed, but not for the version removed: %v", errs[0])
	}
	// An ordinary update of the control goes through, and fixes nothing:
	// its entries still name v1.
	patched, err := env.Dynamic.Resource(control.GVR("v2")).Namespace(ns).Patch(framework.Context(t, time.Minute), "obj-000",
		types.MergePatchType, []byte(`{"metadata":{"labels":{"edited":"yes"}}}`), metav1.PatchOptions{FieldManager: "erin"})
	if err != nil {
		t.Fatalf("update a control object: %v", err)
	}
	if got := versionsNamed([]unstructured.Unstructured{*patched}); got[control.Group+"/v1"] == 0 {
		t.Errorf("after an update the control's entries name %v: no longer v1, so the control proves nothing", got)
	}
	// Every object reads, and each first manager still owns its field.
	for _, o := range env.List(t, r.GVR("v2")) {
		got := ownershipOf(&o)
		for _, m := range []string{alice + " Apply ", bob + " Apply ", carol + " Update ", "dave Apply "} {
			if got[m] == "" {
				t.Errorf("%s: no entry of %q after the new manager's apply: %v", o.GetName(), m, got)
			}
		}
	}
}

// pruneStoredVersions cuts a CRD's storedVersions to version, as a
// migrator that knows nothing of managedFields does.
func pruneStoredVersions(t *testing.T, env *framework.Env, crdName, version string) {
	t.Helper()
	ctx := framework.Context(t, time.Minute)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: crdName}, crd); err != nil {
			return err
		}
		crd.Status.StoredVersions = []string{version}
		return env.Client.Status().Update(ctx, crd)
	})
	if err != nil {
		t.Fatalf("prune storedVersions of %s: %v", crdName, err)
	}
}

// TestRetireUnservesOnlyAfterAQuietWindow: while a client keeps reading
// v1, --unserve refuses and names the API server that answered it; once
// the client stops, a quiet window later it stops serving v1.
func TestRetireUnservesOnlyAfterAQuietWindow(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	kubeconfig := env.KubeconfigFile(t)
	r := env.NewResource(t)
	ns := framework.TestName(t)
	const n = 5
	appliedObjects(t, env, r, ns, n)
	env.SetStorage(t, r, "v2")
	name := "widgets.v1." + r.Group

	ctx, stop := context.WithCancel(framework.Context(t, 5*time.Minute))
	reading := make(chan struct{})
	go func() {
		defer close(reading)
		for ctx.Err() == nil {
			_, _ = env.Dynamic.Resource(r.GVR("v1")).Namespace(ns).Get(ctx, "obj-000", metav1.GetOptions{})
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	code, out, errOut := framework.RunSVM(t, kubeconfig, 3*time.Minute, "retire", name, "--unserve", "--quiet-for", "3s", "--crd-drain-margin", framework.TestDrainMargin.String())
	stop()
	<-reading
	if code != 3 {
		t.Errorf("exit %d while a client reads v1, want 3\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{"not unserved: clients still use it", env.CP.APIServerURL + " answered", "storedVersions: pruned to [v2]"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal does not say %q:\n%s", want, out)
		}
	}
	if !env.CRDServes(t, r.CRDName(), "v1") {
		t.Fatal("v1 was unserved while a client read it")
	}

	code, out, errOut = framework.RunSVM(t, kubeconfig, 3*time.Minute, "retire", name, "--unserve", "--quiet-for", "3s", "-o", "json", "--crd-drain-margin", framework.TestDrainMargin.String())
	if code != 0 {
		t.Fatalf("exit %d after the client stopped, want 0\n%s\n%s", code, out, errOut)
	}
	var report struct {
		Version  string `json:"version"`
		Outcome  string `json:"outcome"`
		Unserved bool   `json:"unserved"`
		Requests []struct {
			Endpoint     string `json:"endpoint"`
			SeenInWindow int64  `json:"seenInQuietWindow"`
		} `json:"requests"`
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out)
	}
	if report.Version != "v1" || report.Outcome != "done" || !report.Unserved || len(report.Requests) == 0 || report.Requests[0].SeenInWindow != 0 {
		t.Errorf("report %+v, want version v1, done, unserved, a quiet server", report)
	}
	if env.CRDServes(t, r.CRDName(), "v1") {
		t.Error("v1 is still served after a quiet window")
	}
	// The objects still read, in the version kept.
	if got := len(env.List(t, r.GVR("v2"))); got != n {
		t.Errorf("%d objects read in v2, want %d", got, n)
	}
}

// TestRetireLosesNoConcurrentWrite retires v1 (pkg/migrate's Retire, in
// process) while another client updates and deletes objects. All objects
// are listed at once, before the writer starts, so that the writer's
// updates make the retirement's writes meet conflicts: each is answered by
// reading the object again, and no update is lost.
func TestRetireLosesNoConcurrentWrite(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	r := env.NewResource(t)
	ns := framework.TestName(t)
	const n = 600
	env.CreateObjects(t, r, []string{ns}, n)
	env.SetStorage(t, r, "v2")
	before, _ := snapshotWithout(t, env, r, "v2")
	conflicts := func() float64 {
		return env.ServerMetric(t, "apiserver_request_total", `group="`+r.Group+`"`, `verb="PATCH"`, `code="409"`) +
			env.ServerMetric(t, "apiserver_request_total", `group="`+r.Group+`"`, `verb="PUT"`, `code="409"`)
	}
	conflictsBefore := conflicts()

	ctx := framework.Context(t, 5*time.Minute)
	type outcome struct {
		res migrate.RetireResult
		err error
	}
	done := make(chan outcome, 1)
	started := make(chan struct{})
	var once sync.Once
	go func() {
		res, err := migrate.Retire(ctx, env.Config, r.GVR("v1"), migrate.RetireOptions{Options: migrate.Options{
			ChunkSize: n, Workers: 2, QPS: 150, CRDDrainMargin: framework.TestDrainMargin,
			OnProgress: func(migrate.Progress) { once.Do(func() { close(started) }) },
		}})
		done <- outcome{res, err}
	}()
	<-started

	// From the last object back, so that the writer is ahead of the
	// retirement: update two in three, delete the third.
	updated, deleted := map[string]bool{}, map[string]bool{}
	client := env.Dynamic.Resource(r.GVR("v2")).Namespace(ns)
	for i := n - 1; i >= 0; i -= 2 {
		name := fmt.Sprintf("obj-%05d", i)
		if i%3 == 0 {
			if err := client.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatalf("delete %s: %v", name, err)
			}
			deleted[ns+"/"+name] = true
			continue
		}
		patch := fmt.Appendf(nil, `{"spec":{"updatedBy":"writer-%d"}}`, i)
		if _, err := client.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "writer"}); err != nil {
			t.Fatalf("update %s: %v", name, err)
		}
		updated[ns+"/"+name] = true
	}
	out := <-done
	if out.err != nil {
		t.Fatalf("retire: %v", out.err)
	}
	c := out.res.Migration.Counts
	// An object deleted after the retirement wrote it counts as written.
	if c.Handled() != n || c.Failed != 0 || c.Gone == 0 || c.Gone > int64(len(deleted)) {
		t.Errorf("counts %+v: want %d handled, 1 to %d gone, none failed", c, n, len(deleted))
	}
	if got := conflicts() - conflictsBefore; got == 0 {
		t.Error("no write of the retirement met a conflict: the writer never overtook it")
	}
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": n - len(deleted)})
	if named := env.ManagedFieldsVersions(t, r.EtcdPrefix()); named[r.Group+"/v1"] != 0 {
		t.Errorf("etcd: %d managedFields entries still name v1", named[r.Group+"/v1"])
	}
	after, _ := snapshotWithout(t, env, r, "v2")
	framework.ExpectWritesKept(t, before, after, updated, deleted)
}

// TestRetireBuiltInVersionNoLongerServed: DeviceClasses written through
// resource.k8s.io/v1beta2, served while --runtime-config enabled it, keep
// managedFields entries naming it after the API server restarts without
// it. svm retire moves them to v1, every owned field being one v1's schema
// has, and rewrites no other object.
func TestRetireBuiltInVersionNoLongerServed(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{APIServerFlags: []string{"--runtime-config=resource.k8s.io/v1beta2=true"}})
	kubeconfig := env.KubeconfigFile(t)
	ctx := framework.Context(t, 5*time.Minute)
	beta := schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1beta2", Resource: "deviceclasses"}
	v1 := beta.GroupResource().WithVersion("v1")
	prefix := framework.TestName(t)
	const n = 4
	for i := range n {
		name := fmt.Sprintf("%s-%d", prefix, i)
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceClass",
			"metadata": map[string]any{"name": name, "labels": map[string]any{"tier": fmt.Sprint(i)}},
			"spec": map[string]any{"selectors": []any{map[string]any{"cel": map[string]any{
				"expression": fmt.Sprintf("device.driver == \"gpu-%d.example.com\"", i),
			}}}},
		}}
		if _, err := env.Dynamic.Resource(beta).Apply(ctx, name, obj, metav1.ApplyOptions{FieldManager: alice}); err != nil {
			t.Fatalf("apply %s through v1beta2: %v", name, err)
		}
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"carol":"c-%d"}}}`, i)
		if _, err := env.Dynamic.Resource(beta).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: carol}); err != nil {
			t.Fatalf("update %s through v1beta2: %v", name, err)
		}
	}
	// An object written through v1 alone, already stored in v1 with no
	// entry naming v1beta2, is written (no StorageState says what is
	// stored) but not stored anew.
	untouched := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
		"metadata": map[string]any{"name": prefix + "-v1"},
	}}
	if _, err := env.Dynamic.Resource(v1).Apply(ctx, untouched.GetName(), untouched, metav1.ApplyOptions{FieldManager: bob}); err != nil {
		t.Fatalf("apply through v1: %v", err)
	}
	ownedBefore := map[string]ownership{}
	for _, o := range env.List(t, v1) {
		ownedBefore[o.GetName()] = ownershipOf(&o)
	}

	env.CP.SetAPIServerFlags()
	if err := env.CP.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Discovery.ServerResourcesForGroupVersion("resource.k8s.io/v1beta2"); err == nil {
		t.Fatal("resource.k8s.io/v1beta2 still served after the restart without --runtime-config")
	}
	if got := versionsNamed(env.List(t, v1)); got["resource.k8s.io/v1beta2"] != 2*n {
		t.Fatalf("managedFields before: %v, want %d entries naming v1beta2", got, 2*n)
	}
	revisions := env.ModRevisions(t, "/registry/deviceclasses/")

	code, out, errOut := framework.RunSVM(t, kubeconfig, 3*time.Minute, "retire", "deviceclasses.v1beta2.resource.k8s.io")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	// No StorageState tells what is stored: every object is rewritten.
	for _, want := range []string{"no StorageState records what is stored", fmt.Sprintf("managedFields moved off the retired versions on %d objects", n)} {
		if !strings.Contains(out, want) {
			t.Errorf("svm retire does not say %q:\n%s", want, out)
		}
	}
	for key, raw := range env.RawValues(t, "/registry/deviceclasses/") {
		if !strings.Contains(key, prefix) {
			continue
		}
		if strings.Contains(string(raw), "resource.k8s.io/v1beta2") {
			t.Errorf("etcd: %s still names resource.k8s.io/v1beta2", key)
		}
	}
	for _, o := range env.List(t, v1) {
		if !strings.HasPrefix(o.GetName(), prefix) {
			continue
		}
		for _, e := range o.GetManagedFields() {
			if e.APIVersion != "resource.k8s.io/v1" {
				t.Errorf("%s: entry of %s names %s", o.GetName(), e.Manager, e.APIVersion)
			}
		}
		if diff := cmp.Diff(ownedBefore[o.GetName()], ownershipOf(&o)); diff != "" {
			t.Errorf("%s: ownership changed (-before +after):\n%s", o.GetName(), diff)
		}
	}
	after := env.ModRevisions(t, "/registry/deviceclasses/")
	for key, rev := range after {
		if strings.HasSuffix(key, prefix+"-v1") && rev != revisions[key] {
			t.Errorf("%s, written through v1 only, was stored anew", key)
		}
	}
	// Server-side apply through v1 by a new manager.
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
		"metadata": map[string]any{"name": prefix + "-0", "labels": map[string]any{"dave": "yes"}},
	}}
	if _, err := env.Dynamic.Resource(v1).Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: "dave"}); err != nil {
		t.Errorf("server-side apply after the retirement: %v", err)
	}
}

// TestRetireWaitsForWritesInFlight: a write held by a webhook across a
// storage flip lands in v1 after it. svm retire, run at once, waits out
// --crd-drain-margin (twice the API server's request timeout) since the
// CRD changed before it lists, so it rewrites that object too before it
// prunes v1.
func TestRetireWaitsForWritesInFlight(t *testing.T) {
	t.Parallel()
	const n = 20
	// The write is held longer than svm takes to start and list, however
	// loaded the machine.
	const requestTimeout, hold = 30 * time.Second, 12 * time.Second
	env := framework.Start(t, controlplane.Options{APIServerFlags: []string{"--request-timeout=" + requestTimeout.String()}})
	r := framework.Resource{Group: "inflight.example.com", Plural: "widgets", Kind: "Widget"}
	env.CreateResource(t, r)
	env.CreateObjects(t, r, []string{"retire"}, n)
	// svm is built before the change: building it on a loaded machine can
	// take longer than the margin, which would then have passed already.
	framework.SVMBinary(t)
	write := framework.HoldWrite(t, env, r, "v1", "retire", "obj-00003", hold)
	env.SetStorage(t, r, "v2")

	margin := 2 * requestTimeout
	code, out, errOut := framework.RunSVM(t, env.KubeconfigFile(t), 3*time.Minute, "retire", "widgets.v1."+r.Group, "--crd-drain-margin", margin.String())
	write.Wait(t)
	if code != 0 {
		t.Fatalf("svm retire: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "waiting until") || !strings.Contains(errOut, "--crd-drain-margin "+margin.String()) {
		t.Errorf("svm retire does not say it waits for writes in flight:\n%s", errOut)
	}
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": n})
	if got := env.CRDStoredVersions(t, r.CRDName()); !slices.Equal(got, []string{"v2"}) {
		t.Errorf("storedVersions %v, want [v2]", got)
	}
}
