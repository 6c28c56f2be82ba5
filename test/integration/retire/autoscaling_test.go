package retire_test

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
	"sigs.k8s.io/structured-merge-diff/v6/value"

	"github.com/svm-project/svm/pkg/migrate"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

var (
	hpaV1 = schema.GroupVersionResource{Group: "autoscaling", Version: "v1", Resource: "horizontalpodautoscalers"}
	hpaV2 = hpaV1.GroupResource().WithVersion("v2")
)

// The managers of the HorizontalPodAutoscalers, besides alice, who applies
// through autoscaling/v2 (spec.metrics, and spec.behavior on the "kept"
// ones), bob, who applies a label and spec.maxReplicas through v1, and
// carol, who updates a label and spec.minReplicas through v1.
const (
	dave = "dave" // applies spec.behavior through v1, as its annotation
	erin = "erin" // applies other values, to see who owns what
)

// behaviorAnnotation is where autoscaling/v1 keeps v2's spec.behavior.
const behaviorAnnotation = "autoscaling.alpha.kubernetes.io/behavior"

// TestRetireAutoscalingV1KeepsFieldsWhereV2HasThem: HorizontalPodAutoscalers
// applied through autoscaling/v2 with spec.metrics and spec.behavior, and
// written through v1 too. Kubernetes' conversion keeps v2's spec.behavior
// and all metrics but CPU in annotations of v1, which v2 does not show. svm
// retire of v1 (v2 is the storage version, kept) moves the v1 entries whose
// fields the API server shows at the same paths in v2 (a label,
// spec.maxReplicas, spec.minReplicas), and leaves, NotConverted, the entry
// that owns the behavior annotation: in v2 there is no such annotation,
// and its value is spread over spec.behavior. No entry claims a field its
// version does not show; the managers' next applies through v2 go through
// and own what they owned, and the entry left still holds its manager's
// ownership of spec.behavior against another's apply.
func TestRetireAutoscalingV1KeepsFieldsWhereV2HasThem(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{})
	ctx := framework.Context(t, 5*time.Minute)
	ns := framework.TestName(t)
	env.CreateNamespace(t, ns)
	const n = 2
	writeHPAs(t, env, ns, n)
	before := hpaEntries(t, env, ns)
	expectClaimsExist(t, env, ns)

	res, err := migrate.Retire(ctx, env.Config, hpaV1, migrate.RetireOptions{})
	switch {
	case err == nil:
		t.Error("Retire moved every entry, want ErrManagedFieldsLeft (dave's entries)")
	case !errors.Is(err, migrate.ErrManagedFieldsLeft):
		t.Fatalf("Retire = %v, want ErrManagedFieldsLeft (dave's entries)", err)
	}
	expectHPAsLeft(t, res, ns, n)
	after := hpaEntries(t, env, ns)
	for name, entries := range before {
		want := map[string]hpaEntry{}
		for k, e := range entries {
			if e.APIVersion == "autoscaling/v1" && !strings.HasPrefix(k, dave+" ") {
				e.APIVersion = "autoscaling/v2"
			}
			want[k] = e
		}
		if diff := cmp.Diff(want, after[name]); diff != "" {
			t.Errorf("%s: entries (-want +got):\n%s", name, diff)
		}
	}
	expectClaimsExist(t, env, ns)
	expectHPAsStored(t, env, ns)
	// dave's entry, left naming v1, still owns spec.behavior: another
	// manager's apply of other values conflicts with dave, and with bob
	// and alice where the moved entries own.
	if diff := cmp.Diff(hpaConflictsWant(n), hpaConflicts(t, env, ns, n)); diff != "" {
		t.Errorf("conflicts of erin's dry-run applies through v2 (-want +got):\n%s", diff)
	}
	reapplyThroughV2(t, env, ns, n, after)
}

// hpaEntry is an entry as the test compares it: the version it names and
// its fields.
type hpaEntry struct {
	APIVersion string
	Fields     string
}

// hpaEntries are the entries of the namespace's HorizontalPodAutoscalers,
// by object and "manager operation".
func hpaEntries(t *testing.T, env *framework.Env, ns string) map[string]map[string]hpaEntry {
	t.Helper()
	out := map[string]map[string]hpaEntry{}
	for _, o := range listIn(t, env, hpaV2, ns) {
		out[o.GetName()] = map[string]hpaEntry{}
		for _, e := range o.GetManagedFields() {
			out[o.GetName()][e.Manager+" "+string(e.Operation)] = hpaEntry{APIVersion: e.APIVersion, Fields: string(e.FieldsV1.Raw)}
		}
	}
	return out
}

func listIn(t *testing.T, env *framework.Env, gvr schema.GroupVersionResource, ns string) []unstructured.Unstructured {
	t.Helper()
	list, err := env.Dynamic.Resource(gvr).Namespace(ns).List(framework.Context(t, time.Minute), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list %s: %v", gvr, err)
	}
	return list.Items
}

// hpaSpec is alice's spec of name through v2: memory and CPU metrics,
// and spec.behavior when behavior. v1 keeps the CPU utilization in
// spec.targetCPUUtilizationPercentage and the other metrics in an
// annotation, and converts them back in that order: in another, every
// write through v1 would reorder alice's metrics. No metric holds a
// quantity: kube-apiserver v1.37.2 takes spec.metrics from its owner on
// every write of an object whose metrics hold one, an empty one too.
// spec.minReplicas is carol's.
func hpaSpec(name string, behavior bool) map[string]any {
	resource := func(name string, target map[string]any) map[string]any {
		return map[string]any{"type": "Resource", "resource": map[string]any{"name": name, "target": target}}
	}
	spec := map[string]any{
		"scaleTargetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
		"maxReplicas":    int64(5),
		"metrics": []any{
			resource("memory", map[string]any{"type": "Utilization", "averageUtilization": int64(70)}),
			resource("cpu", map[string]any{"type": "Utilization", "averageUtilization": int64(60)}),
		},
	}
	if behavior {
		spec["behavior"] = scaleDown(120)
	}
	return spec
}

// scaleDown is a spec.behavior of v2 that scales down after window seconds.
func scaleDown(window int64) map[string]any {
	return map[string]any{"scaleDown": map[string]any{
		"stabilizationWindowSeconds": window,
		"policies":                   []any{map[string]any{"type": "Pods", "value": int64(2), "periodSeconds": int64(60)}},
	}}
}

func hpa(version, ns, name string, metadata, spec map[string]any) *unstructured.Unstructured {
	metadata["name"], metadata["namespace"] = name, ns
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "autoscaling/" + version, "kind": "HorizontalPodAutoscaler", "metadata": metadata,
	}}
	if spec != nil {
		obj.Object["spec"] = spec
	}
	return obj
}

func applyHPA(t *testing.T, env *framework.Env, obj *unstructured.Unstructured, manager string, dryRun bool) error {
	t.Helper()
	gvr := hpaV1.GroupResource().WithVersion(strings.TrimPrefix(obj.GetAPIVersion(), "autoscaling/"))
	opts := metav1.ApplyOptions{FieldManager: manager}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err := env.Dynamic.Resource(gvr).Namespace(obj.GetNamespace()).Apply(framework.Context(t, time.Minute), obj.GetName(), obj, opts)
	return err
}

// writeHPAs writes n "kept-i" objects, alice's with spec.behavior, bob's
// and carol's entries naming v1 and owning fields v2 keeps at their
// paths; and n "stashed-i" objects, alice's without spec.behavior and
// dave's, naming v1, owning the annotation v1 keeps it in.
func writeHPAs(t *testing.T, env *framework.Env, ns string, n int) {
	t.Helper()
	ctx := framework.Context(t, time.Minute)
	for i := range n {
		kept, stashed := fmt.Sprintf("kept-%d", i), fmt.Sprintf("stashed-%d", i)
		for _, w := range []struct {
			obj     *unstructured.Unstructured
			manager string
		}{
			{hpa("v2", ns, kept, map[string]any{}, hpaSpec(kept, true)), alice},
			{hpa("v1", ns, kept, map[string]any{"labels": map[string]any{"bob": fmt.Sprintf("b-%d", i)}}, map[string]any{"maxReplicas": int64(5)}), bob},
			{hpa("v2", ns, stashed, map[string]any{}, hpaSpec(stashed, false)), alice},
			{hpa("v1", ns, stashed, map[string]any{"annotations": map[string]any{
				behaviorAnnotation: `{"ScaleDown":{"StabilizationWindowSeconds":120,"Policies":[{"Type":"Pods","Value":2,"PeriodSeconds":60}]}}`,
			}}, nil), dave},
		} {
			if err := applyHPA(t, env, w.obj, w.manager, false); err != nil {
				t.Fatalf("apply %s through %s as %s: %v", w.obj.GetName(), w.obj.GetAPIVersion(), w.manager, err)
			}
		}
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{"carol":"c-%d"}},"spec":{"minReplicas":2}}`, i)
		if _, err := env.Dynamic.Resource(hpaV1).Namespace(ns).Patch(ctx, kept, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: carol}); err != nil {
			t.Fatalf("update %s through v1 as %s: %v", kept, carol, err)
		}
	}
	for _, o := range listIn(t, env, hpaV2, ns) {
		if _, found, _ := unstructured.NestedMap(o.Object, "spec", "behavior"); !found {
			t.Fatalf("%s has no spec.behavior in v2", o.GetName())
		}
	}
	for _, o := range listIn(t, env, hpaV1, ns) {
		if _, ok := o.GetAnnotations()[behaviorAnnotation]; !ok {
			t.Fatalf("%s has no annotation %s in v1: the test needs the conversion to keep spec.behavior there", o.GetName(), behaviorAnnotation)
		}
	}
}

// expectHPAsLeft checks what Retire reports: the "kept" objects' entries
// moved, dave's entries left, NotConverted.
func expectHPAsLeft(t *testing.T, res migrate.RetireResult, ns string, n int) {
	t.Helper()
	m := res.Migration
	if m == nil {
		t.Fatal("Retire reports no migration")
	}
	if diff := cmp.Diff(migrate.LeftCounts{NotConverted: int64(n)}, m.ManagedFieldsLeft); diff != "" {
		t.Errorf("entries left, by reason (-want +got):\n%s", diff)
	}
	if m.ManagedFieldsRewritten != int64(n) || m.Failed != 0 {
		t.Errorf("counts %+v: want the %d kept objects' entries moved, none failed", m.Counts, n)
	}
	for _, l := range m.LeftEntries {
		if l.Namespace != ns || !strings.HasPrefix(l.Name, "stashed-") || l.Manager != dave || l.APIVersion != "autoscaling/v1" || l.Reason != "NotConverted" {
			t.Errorf("left %+v, want dave's entries of the stashed objects, NotConverted", l)
		}
	}
	t.Logf("left: %+v", m.LeftEntries)
}

// expectClaimsExist checks that every field an entry owns is in the object
// as the entry's version serves it: no entry claims a field its version
// does not show. The objects hold no zero value JSON omits.
func expectClaimsExist(t *testing.T, env *framework.Env, ns string) {
	t.Helper()
	in := map[string]map[string]unstructured.Unstructured{}
	for _, gvr := range []schema.GroupVersionResource{hpaV1, hpaV2} {
		in[gvr.GroupVersion().String()] = map[string]unstructured.Unstructured{}
		for _, o := range listIn(t, env, gvr, ns) {
			in[gvr.GroupVersion().String()][o.GetName()] = o
		}
	}
	for name, o := range in[hpaV2.GroupVersion().String()] {
		for _, e := range o.GetManagedFields() {
			fields := fieldpath.NewSet()
			if err := fields.FromJSON(bytes.NewReader(e.FieldsV1.Raw)); err != nil {
				t.Fatalf("%s: fields of %s: %v", name, e.Manager, err)
			}
			obj := in[e.APIVersion][name]
			fields.Leaves().Iterate(func(p fieldpath.Path) {
				if !holds(obj.Object, p) {
					t.Errorf("%s: the entry of %s (%s) owns %s, which the object does not have in %s", name, e.Manager, e.Operation, p, e.APIVersion)
				}
			})
		}
	}
}

// holds reports whether obj has a value at p.
func holds(obj any, p fieldpath.Path) bool {
	cur := obj
	for _, pe := range p {
		if pe.FieldName != nil {
			m, ok := cur.(map[string]any)
			if !ok {
				return false
			}
			if cur, ok = m[*pe.FieldName]; !ok {
				return false
			}
			continue
		}
		l, ok := cur.([]any)
		if !ok {
			return false
		}
		found := false
		for i, item := range l {
			if matches(item, i, pe) {
				cur, found = item, true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// matches reports whether item, the i-th of its list, is the one pe names.
func matches(item any, i int, pe fieldpath.PathElement) bool {
	switch {
	case pe.Key != nil:
		m, ok := item.(map[string]any)
		if !ok {
			return false
		}
		for _, f := range *pe.Key {
			if v, ok := m[f.Name]; !ok || !value.Equals(value.NewValueInterface(v), f.Value) {
				return false
			}
		}
		return true
	case pe.Value != nil:
		return value.Equals(value.NewValueInterface(item), *pe.Value)
	case pe.Index != nil:
		return *pe.Index == i
	}
	return false
}

// expectHPAsStored checks etcd: the kept objects' stored entries no longer
// name v1; the stashed objects' still do (dave's).
func expectHPAsStored(t *testing.T, env *framework.Env, ns string) {
	t.Helper()
	raws := env.RawValues(t, "/registry/horizontalpodautoscalers/"+ns+"/")
	if len(raws) == 0 {
		t.Fatal("etcd holds none of the objects")
	}
	for key, raw := range raws {
		names := bytes.Contains(raw, []byte("autoscaling/v1"))
		if stashed := strings.Contains(key, "/stashed-"); names != stashed {
			t.Errorf("etcd: %s names autoscaling/v1: %v, want %v", key, names, stashed)
		}
	}
}

// hpaConflicts has erin apply, as a dry run through v2, other values of
// the fields the managers own, and returns the conflicts: "object: field
// by manager".
func hpaConflicts(t *testing.T, env *framework.Env, ns string, n int) []string {
	t.Helper()
	var out []string
	for i := range n {
		for _, obj := range []*unstructured.Unstructured{
			hpa("v2", ns, fmt.Sprintf("kept-%d", i), map[string]any{"labels": map[string]any{"bob": "other", "carol": "other"}},
				map[string]any{"maxReplicas": int64(7), "minReplicas": int64(3)}),
			hpa("v2", ns, fmt.Sprintf("stashed-%d", i), map[string]any{}, map[string]any{"behavior": scaleDown(30)}),
		} {
			err := applyHPA(t, env, obj, erin, true)
			var status apierrors.APIStatus
			if err == nil {
				continue
			}
			if !apierrors.IsConflict(err) || !errors.As(err, &status) || status.Status().Details == nil {
				t.Fatalf("erin's apply to %s failed, and not with conflicts: %v", obj.GetName(), err)
			}
			for _, c := range status.Status().Details.Causes {
				by, _, _ := strings.Cut(strings.TrimPrefix(c.Message, `conflict with "`), `"`)
				out = append(out, obj.GetName()+": "+c.Field+" by "+by)
			}
		}
	}
	sort.Strings(out)
	return out
}

// hpaConflictsWant are the conflicts hpaConflicts meets while each manager
// owns what it wrote: dave's ownership of spec.behavior shows, through v1,
// as its annotation.
func hpaConflictsWant(n int) []string {
	var out []string
	for i := range n {
		out = append(out,
			fmt.Sprintf("kept-%d: .metadata.labels.bob by bob", i),
			fmt.Sprintf("kept-%d: .metadata.labels.carol by carol", i),
			fmt.Sprintf("kept-%d: .spec.maxReplicas by alice", i),
			fmt.Sprintf("kept-%d: .spec.maxReplicas by bob", i),
			fmt.Sprintf("kept-%d: .spec.minReplicas by carol", i),
			fmt.Sprintf("stashed-%d: .metadata.annotations.%s by dave", i, behaviorAnnotation),
		)
	}
	sort.Strings(out)
	return out
}

// reapplyThroughV2 has alice and bob apply through v2 what they applied,
// and dave spec.behavior as v2 has it: no conflict, no value changes,
// and alice and bob own what they owned (after, the entries after the
// retirement). dave's entry then names v2.
func reapplyThroughV2(t *testing.T, env *framework.Env, ns string, n int, after map[string]map[string]hpaEntry) {
	t.Helper()
	specs := map[string]any{}
	for _, o := range listIn(t, env, hpaV2, ns) {
		specs[o.GetName()] = o.Object["spec"]
	}
	for i := range n {
		kept, stashed := fmt.Sprintf("kept-%d", i), fmt.Sprintf("stashed-%d", i)
		for _, w := range []struct {
			obj     *unstructured.Unstructured
			manager string
		}{
			{hpa("v2", ns, kept, map[string]any{}, hpaSpec(kept, true)), alice},
			{hpa("v2", ns, kept, map[string]any{"labels": map[string]any{"bob": fmt.Sprintf("b-%d", i)}}, map[string]any{"maxReplicas": int64(5)}), bob},
			{hpa("v2", ns, stashed, map[string]any{}, hpaSpec(stashed, false)), alice},
			{hpa("v2", ns, stashed, map[string]any{}, map[string]any{"behavior": scaleDown(120)}), dave},
		} {
			if err := applyHPA(t, env, w.obj, w.manager, false); err != nil {
				t.Errorf("apply %s through v2 as %s after the retirement: %v", w.obj.GetName(), w.manager, err)
			}
		}
	}
	now := hpaEntries(t, env, ns)
	for _, o := range listIn(t, env, hpaV2, ns) {
		name := o.GetName()
		if diff := cmp.Diff(specs[name], o.Object["spec"]); diff != "" {
			t.Errorf("%s: spec changed by the applies through v2 (-before +after):\n%s", name, diff)
		}
		for k, e := range now[name] {
			if strings.HasPrefix(k, dave+" ") {
				if e.APIVersion != "autoscaling/v2" || !strings.Contains(e.Fields, `"f:stabilizationWindowSeconds"`) {
					t.Errorf("%s: dave's entry after his apply through v2: %+v, want one naming v2 that owns spec.behavior", name, e)
				}
				continue
			}
			if diff := cmp.Diff(after[name][k], e); diff != "" {
				t.Errorf("%s: entry %s after the applies through v2 (-before +after):\n%s", name, k, diff)
			}
		}
	}
	expectClaimsExist(t, env, ns)
}
