package retire_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// The managers of a renaming resource's objects (CreateRenamingResource,
// whose v1 spec.replicas is v2's spec.scale.replicas) besides alice, bob
// and carol: one scales through the scale subresource, one writes status.
const (
	scaler = "scaler" // scales the odd objects through /scale
	ctrl   = "ctrl"   // updates status.phase through /status
)

// managedObjects creates n objects of r, a renaming resource, in ns
// through v1, as a cluster's managers write them: alice applies
// spec.replicas, spec.paused: false (a zero value) and a port, bob applies
// spec.color and spec.mode (an enum), carol updates a label, scaler scales the odd objects through
// /scale (taking their replicas from alice), and ctrl updates status
// through /status. Every entry names v1.
func managedObjects(t *testing.T, env *framework.Env, r framework.Resource, ns string, n int) {
	t.Helper()
	env.CreateNamespace(t, ns)
	ctx := framework.Context(t, 5*time.Minute)
	c := env.Dynamic.Resource(r.GVR("v1")).Namespace(ns)
	for i := range n {
		name := fmt.Sprintf("obj-%03d", i)
		for manager, spec := range map[string]map[string]any{
			alice: {"replicas": int64(3), "paused": false, "ports": []any{map[string]any{"name": "http", "port": int64(80)}}},
			bob:   {"color": "red", "mode": "Fast"},
		} {
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": r.Group + "/v1", "kind": r.Kind, "metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec,
			}}
			if _, err := c.Apply(ctx, name, obj, metav1.ApplyOptions{FieldManager: manager}); err != nil {
				t.Fatalf("apply %s as %s: %v", name, manager, err)
			}
		}
		patches := []struct{ manager, patch, subresource string }{
			{carol, fmt.Sprintf(`{"metadata":{"labels":{"carol":"c-%d"}}}`, i), ""},
			{ctrl, `{"status":{"phase":"Ready"}}`, "status"},
		}
		if i%2 == 1 {
			patches = append(patches, struct{ manager, patch, subresource string }{scaler, `{"spec":{"replicas":5}}`, "scale"})
		}
		for _, p := range patches {
			if _, err := c.Patch(ctx, name, types.MergePatchType, []byte(p.patch), metav1.PatchOptions{FieldManager: p.manager}, subresources(p.subresource)...); err != nil {
				t.Fatalf("update %s as %s: %v", name, p.manager, err)
			}
		}
	}
}

func subresources(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// owned is what every entry of an object owns, path by path, by manager,
// operation and subresource, with the apiVersion it names.
type owned map[string]ownedFields

type ownedFields struct {
	APIVersion string
	Paths      []string
}

func ownedOf(t *testing.T, obj *unstructured.Unstructured) owned {
	t.Helper()
	out := owned{}
	for _, e := range obj.GetManagedFields() {
		set := fieldpath.NewSet()
		if err := set.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
			t.Fatalf("%s: fields of %s: %v", obj.GetName(), e.Manager, err)
		}
		out[e.Manager+" "+string(e.Operation)+" "+e.Subresource] = ownedFields{APIVersion: e.APIVersion, Paths: pathsOf(set)}
	}
	return out
}

func pathsOf(set *fieldpath.Set) []string {
	var paths []string
	set.Iterate(func(p fieldpath.Path) { paths = append(paths, p.String()) })
	sort.Strings(paths)
	return paths
}

// inV2 is what the entries own once moved to v2 through the conversion:
// the same fields, v1's spec.replicas being v2's spec.scale.replicas.
func (o owned) inV2(group string) owned {
	out := owned{}
	for k, f := range o {
		moved := ownedFields{APIVersion: group + "/v2"}
		for _, p := range f.Paths {
			moved.Paths = append(moved.Paths, renamed(p))
		}
		sort.Strings(moved.Paths)
		out[k] = moved
	}
	return out
}

// renamed is v1's path p (as fieldpath prints it) in v2.
func renamed(p string) string {
	if p == ".spec.replicas" {
		return ".spec.scale.replicas"
	}
	return p
}

// ownedByObject is owned for every object of r, read in version.
func ownedByObject(t *testing.T, env *framework.Env, r framework.Resource, version string) map[string]owned {
	t.Helper()
	out := map[string]owned{}
	for _, o := range env.List(t, r.GVR(version)) {
		out[o.GetNamespace()+"/"+o.GetName()] = ownedOf(t, &o)
	}
	return out
}

// expectOwnedInV2 checks that every manager of every object owns in v2
// what it owned in v1, path by path, mapped through the conversion.
func expectOwnedInV2(t *testing.T, env *framework.Env, r framework.Resource, before map[string]owned) {
	t.Helper()
	want := map[string]owned{}
	for k, o := range before {
		want[k] = o.inV2(r.Group)
	}
	if diff := cmp.Diff(want, ownedByObject(t, env, r, "v2")); diff != "" {
		t.Errorf("ownership after the move, against before's mapped to v2 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{r.Group + "/v2": 4*len(before) + len(before)/2}, env.ManagedFieldsVersions(t, r.EtcdPrefix())); diff != "" {
		t.Errorf("etcd: versions managedFields name (-want +got):\n%s", diff)
	}
}

// ownApply is what manager would apply to object i in version: its own
// fields, with new values, and the subresource it writes through.
func ownApply(r framework.Resource, manager, version, ns string, i int) (*unstructured.Unstructured, string) {
	replicas := func(n int64) map[string]any {
		if version == "v1" {
			return map[string]any{"replicas": n}
		}
		return map[string]any{"scale": map[string]any{"replicas": n}}
	}
	var body map[string]any
	subresource := ""
	switch manager {
	case alice:
		spec := map[string]any{"paused": true, "ports": []any{map[string]any{"name": "http", "port": int64(81)}}}
		if i%2 == 0 {
			for k, v := range replicas(7) {
				spec[k] = v
			}
		}
		body = map[string]any{"spec": spec}
	case bob:
		body = map[string]any{"spec": map[string]any{"color": "blue", "mode": "Slow"}}
	case carol:
		body = map[string]any{"metadata": map[string]any{"labels": map[string]any{"carol": fmt.Sprintf("c2-%d", i)}}}
	case scaler:
		body = map[string]any{"spec": replicas(9)}
	case ctrl:
		body, subresource = map[string]any{"status": map[string]any{"phase": "Done"}}, "status"
	}
	obj := &unstructured.Unstructured{Object: body}
	obj.SetAPIVersion(r.Group + "/" + version)
	obj.SetKind(r.Kind)
	obj.SetName(fmt.Sprintf("obj-%03d", i))
	obj.SetNamespace(ns)
	return obj, subresource
}

// applyConflicts has every manager apply its own fields to every object in
// version (a dry run when dryRun), and returns the conflicts each apply
// met: "object manager: field by whom", the field as v2 names it.
func applyConflicts(t *testing.T, env *framework.Env, r framework.Resource, version, ns string, n int, dryRun bool) []string {
	t.Helper()
	ctx := framework.Context(t, 5*time.Minute)
	opts := metav1.ApplyOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	var out []string
	for i := range n {
		for _, m := range []string{alice, bob, carol, scaler, ctrl} {
			if m == scaler && i%2 == 0 {
				continue
			}
			obj, sub := ownApply(r, m, version, ns, i)
			opts.FieldManager = m
			_, err := env.Dynamic.Resource(r.GVR(version)).Namespace(ns).Apply(ctx, obj.GetName(), obj, opts, subresources(sub)...)
			for _, c := range conflicts(t, err) {
				out = append(out, obj.GetName()+" "+m+": "+c)
			}
		}
	}
	sort.Strings(out)
	return out
}

// conflicts are the conflicts a failed apply met, each as "field by
// manager", the field as v2 names it; none when err is nil.
func conflicts(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	var status apierrors.APIStatus
	if !apierrors.IsConflict(err) || !errors.As(err, &status) || status.Status().Details == nil {
		t.Fatalf("apply failed, and not with conflicts: %v", err)
	}
	var out []string
	for _, c := range status.Status().Details.Causes {
		// "conflict with "carol" using example.com/v1": the manager, not
		// the version it names.
		by, _, _ := strings.Cut(strings.TrimPrefix(c.Message, `conflict with "`), `"`)
		out = append(out, renamed(c.Field)+" by "+by)
	}
	return out
}

// waitV1Gone removes v1 from r's CRD and waits until it is no longer
// served; the API server refuses while storedVersions lists it.
func waitV1Gone(t *testing.T, env *framework.Env, r framework.Resource) {
	t.Helper()
	if err := removeVersion(t, env, r.CRDName(), "v1"); err != nil {
		t.Fatalf("remove v1 from %s: %v", r.CRDName(), err)
	}
	framework.Eventually(t, "v1 no longer served", time.Minute, func(context.Context) (bool, error) {
		_, err := env.Discovery.ServerResourcesForGroupVersion(r.Group + "/v1")
		return err != nil, nil
	})
}

// renamingCase is one renaming resource with its objects written through
// v1 by every manager and its storage flipped to v2: what it was before
// the move.
type renamingCase struct {
	r         framework.Resource
	ns        string
	n         int
	hook      *framework.ConversionWebhook
	content   framework.Snapshot
	owners    map[string]owned
	conflicts []string
}

func newRenamingCase(t *testing.T, env *framework.Env, group string, n int) *renamingCase {
	t.Helper()
	c := &renamingCase{r: framework.Resource{Group: group, Plural: "widgets", Kind: "Widget"}, ns: "managers", n: n}
	env.CreateRenamingResource(t, c.r)
	c.hook = env.StartRenamingConversionWebhook(t, c.r)
	managedObjects(t, env, c.r, c.ns, n)
	env.SetStorage(t, c.r, "v2")
	c.content, _ = snapshotWithout(t, env, c.r, "v2")
	c.owners = ownedByObject(t, env, c.r, "v2")
	c.conflicts = applyConflicts(t, env, c.r, "v1", c.ns, n, true)
	return c
}

// expectMoved checks what must hold once v1 is retired: the content is
// unchanged, every manager owns its fields in v2, v1 can be removed, and
// each manager's apply in v2 meets the conflicts it met in v1, no more.
func (c *renamingCase) expectMoved(t *testing.T, env *framework.Env) {
	t.Helper()
	env.ExpectStored(t, c.r.EtcdPrefix(), map[string]int{c.r.Group + "/v2": c.n})
	after, _ := snapshotWithout(t, env, c.r, "v2")
	if diff := c.content.Diff(after); diff != "" {
		t.Errorf("content changed (-before +after):\n%s", diff)
	}
	expectOwnedInV2(t, env, c.r, c.owners)
	waitV1Gone(t, env, c.r)
	got := applyConflicts(t, env, c.r, "v2", c.ns, c.n, false)
	if diff := cmp.Diff(c.conflicts, got); diff != "" {
		t.Errorf("conflicts of each manager's apply in v2, against those in v1 (-v1 +v2):\n%s", diff)
	}
	if !slices.ContainsFunc(c.conflicts, func(s string) bool { return strings.Contains(s, " "+carol+": ") }) {
		t.Errorf("carol's apply met no conflict with her own update in v1: the comparison proves nothing: %v", c.conflicts)
	}
}

// TestRetireConvertsManagedFieldsThroughTheWebhook: a CRD whose conversion
// webhook moves a field (v1 spec.replicas is v2 spec.scale.replicas),
// objects written through v1 by appliers, an updater, the scale and the
// status subresources. svm retire moves every entry to v2 with its fields
// where the conversion puts them, and v1 can then be removed.
func TestRetireConvertsManagedFieldsThroughTheWebhook(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	const n = 6
	c := newRenamingCase(t, env, framework.TestName(t)+".example.com", n)
	dryRuns := func() float64 {
		return env.ServerMetric(t, "apiserver_request_total", `group="`+c.r.Group+`"`, `dry_run="All"`)
	}
	before, dryBefore := c.hook.Quiet(t), dryRuns()

	code, out, errOut := framework.RunSVM(t, env.KubeconfigFile(t), 3*time.Minute, "retire", "widgets.v1."+c.r.Group, "--crd-drain-margin", framework.TestDrainMargin.String())
	if code != 0 {
		t.Fatalf("svm retire: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{fmt.Sprintf("managedFields moved off the retired versions on %d objects", n), "storedVersions: pruned to [v2]", "done in "} {
		if !strings.Contains(out, want) {
			t.Errorf("svm retire does not say %q:\n%s", want, out)
		}
	}
	calls := c.hook.Quiet(t).Sub(before)
	t.Logf("svm retire of %d objects: %.0f dry runs, %d webhook calls (%.1f per object)", n, dryRuns()-dryBefore, calls.TotalReviews(), float64(calls.TotalReviews())/n)
	c.expectMoved(t, env)
}

// TestTriggerConvertsManagedFieldsThroughTheWebhook is
// TestRetireConvertsManagedFieldsThroughTheWebhook with svm controller's
// trigger: its migration moves the entries naming v1 and then prunes
// storedVersions, and the migration's status says what it moved.
func TestTriggerConvertsManagedFieldsThroughTheWebhook(t *testing.T) {
	t.Parallel()
	// Its own control plane: svm controller acts on every resource.
	env := framework.Start(t, controlplane.Options{})
	env.InstallCRDs(t, framework.CRDBasesDir())
	const n = 6
	c := newRenamingCase(t, env, "renamed.example.com", n)

	env.StartSVM(t, framework.ControllerArgs("--leader-elect=false", "--trigger-interval", "2s", "--crd-settle-delay", "1s")...)
	framework.Eventually(t, "storedVersions pruned to [v2]", 3*time.Minute, func(context.Context) (bool, error) {
		return slices.Equal(env.CRDStoredVersions(t, c.r.CRDName()), []string{"v2"}), nil
	})
	var migrations migrationv1alpha1.StorageVersionMigrationList
	if err := env.Client.List(framework.Context(t, time.Minute), &migrations); err != nil {
		t.Fatal(err)
	}
	said := false
	for _, m := range migrations.Items {
		for _, cond := range m.Status.Conditions {
			said = said || (m.Spec.Resource.Group == c.r.Group && cond.Type == migrationv1alpha1.MigrationSucceeded &&
				strings.Contains(cond.Message, fmt.Sprintf("managedFields moved off the retired versions on %d objects", n)))
		}
	}
	if !said {
		t.Errorf("no succeeded migration of %s says it moved the managedFields of %d objects: %+v", c.r.Group, n, migrations.Items)
	}
	c.expectMoved(t, env)
}
