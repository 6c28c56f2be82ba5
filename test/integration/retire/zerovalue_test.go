package retire_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestRetireBuiltInKeepsAZeroValueAnApplyOwns: LeaseCandidates applied
// through coordination.k8s.io/v1alpha2 with spec.emulationVersion "", a
// zero value that JSON omits: the apply owns the field, and the object as
// any version serves it does not show it. svm retire moves the entry to
// v1beta1 with the field, which v1beta1's schema has, and the applier's
// next apply through v1beta1 goes through and owns what it owned.
func TestRetireBuiltInKeepsAZeroValueAnApplyOwns(t *testing.T) {
	t.Parallel()
	env := framework.Start(t, controlplane.Options{APIServerFlags: []string{
		"--runtime-config=coordination.k8s.io/v1alpha2=true,coordination.k8s.io/v1beta1=true",
	}})
	alpha := schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1alpha2", Resource: "leasecandidates"}
	beta := alpha.GroupResource().WithVersion("v1beta1")
	const n = 3
	ctx := framework.Context(t, 3*time.Minute)
	apply := func(gvr schema.GroupVersionResource, i int) error {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": gvr.GroupVersion().String(), "kind": "LeaseCandidate",
			"metadata": map[string]any{"name": fmt.Sprintf("candidate-%d", i), "namespace": "default"},
			"spec":     map[string]any{"leaseName": "example", "binaryVersion": "1.37.0", "emulationVersion": "", "strategy": "example.com/custom"},
		}}
		_, err := env.Dynamic.Resource(gvr).Namespace("default").Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: alice})
		return err
	}
	for i := range n {
		if err := apply(alpha, i); err != nil {
			t.Fatalf("apply through v1alpha2: %v", err)
		}
	}
	before := map[string]owned{}
	for _, o := range env.List(t, beta) {
		before[o.GetName()] = ownedOf(t, &o)
		if _, found, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "emulationVersion"); found {
			t.Fatalf("%s shows spec.emulationVersion: the test needs a value JSON omits", o.GetName())
		}
		if got := before[o.GetName()][alice+" Apply "]; got.APIVersion != alpha.GroupVersion().String() || !contains(got.Paths, ".spec.emulationVersion") {
			t.Fatalf("%s: alice's entry %+v, want one naming v1alpha2 that owns .spec.emulationVersion", o.GetName(), got)
		}
	}

	code, out, errOut := framework.RunSVM(t, env.KubeconfigFile(t), 3*time.Minute, "retire", "leasecandidates.v1alpha2.coordination.k8s.io")
	if code != 0 {
		t.Fatalf("svm retire: exit %d\n%s\n%s", code, out, errOut)
	}
	if want := fmt.Sprintf("managedFields moved off the retired versions on %d objects", n); !strings.Contains(out, want) {
		t.Errorf("svm retire does not say %q:\n%s", want, out)
	}
	for _, o := range env.List(t, beta) {
		want := before[o.GetName()]
		for k, f := range want {
			f.APIVersion = beta.GroupVersion().String()
			want[k] = f
		}
		if diff := cmp.Diff(want, ownedOf(t, &o)); diff != "" {
			t.Errorf("%s: ownership (-want +got):\n%s", o.GetName(), diff)
		}
	}
	// Stored as protobuf: the apiVersion an entry names is a plain string.
	for key, raw := range env.RawValues(t, "/registry/leasecandidates/") {
		if strings.Contains(string(raw), alpha.GroupVersion().String()) {
			t.Errorf("etcd: %s still names %s", key, alpha.GroupVersion())
		}
	}
	// The applier applies again, through the version kept: no conflict,
	// and it still owns the zero value.
	for i := range n {
		if err := apply(beta, i); err != nil {
			t.Errorf("apply through v1beta1 after the retirement: %v", err)
		}
	}
	for _, o := range env.List(t, beta) {
		if got := ownedOf(t, &o)[alice+" Apply "]; !contains(got.Paths, ".spec.emulationVersion") {
			t.Errorf("%s: alice's entry %+v no longer owns .spec.emulationVersion", o.GetName(), got)
		}
	}
}

func contains(paths []string, p string) bool {
	for _, q := range paths {
		if q == p {
			return true
		}
	}
	return false
}
