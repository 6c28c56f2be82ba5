package conversion_test

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestNoMigrationLosesManagedFields stops the conversion webhook of a
// resource whose objects are stored in v2 already and whose managedFields
// entries name v1 and v2, and runs svm migrate on it, which writes
// through v2, on a release of every supported minor.
//
// Every such write makes the API server's field manager convert the
// object to v1 for the entry naming it, which fails. kube-apiserver
// before 1.37 then clears all of the object's managedFields and stores it
// so (kubernetes/kubernetes#136919): svm, which asks first with a dry run
// of the same write, stops with ManagedFieldsAtRisk and writes nothing.
// kube-apiserver 1.37 keeps the stored entries (#136949): the objects are
// already current, svm needs no dry run and claims no loss. Either way,
// etcd holds every object as it was, managedFields included.
func TestNoMigrationLosesManagedFields(t *testing.T) {
	t.Parallel()
	for _, minor := range framework.SupportedMinors {
		t.Run(minor, func(t *testing.T) {
			t.Parallel()
			env := framework.Start(t, controlplane.Options{Release: minor})
			t.Logf("Kubernetes %s", env.CP.Release())
			r := framework.Resource{Group: "example.com", Plural: "gadgets", Kind: "Gadget"}
			const n = 20
			namedBoth(t, env, r, n)
			expectNoneLost(t, env, r, minor, n, map[string]int{"example.com/v1": n, "example.com/v2": n})
		})
	}
}

// TestNoMigrationLosesEntriesNamingAnUnservedVersion is
// TestNoMigrationLosesManagedFields with entries that name v1 alone, a
// version the CRD still defines but no longer serves (served: false) when
// svm migrates. Discovery does not list v1, yet the field manager converts
// entries naming it, since the CRD defines it: the conversion fails as in
// TestNoMigrationLosesManagedFields, and kube-apiserver before 1.37 clears
// the entries. They are not dropped by design, as an entry naming a
// version the server no longer has would be: svm stops with
// ManagedFieldsAtRisk, writes nothing and counts nothing re-stored.
func TestNoMigrationLosesEntriesNamingAnUnservedVersion(t *testing.T) {
	t.Parallel()
	for _, minor := range framework.SupportedMinors {
		t.Run(minor, func(t *testing.T) {
			t.Parallel()
			env := framework.Start(t, controlplane.Options{Release: minor})
			t.Logf("Kubernetes %s", env.CP.Release())
			r := framework.Resource{Group: "example.com", Plural: "gadgets", Kind: "Gadget"}
			const n = 20
			namedUnserved(t, env, r, n)
			expectNoneLost(t, env, r, minor, n, map[string]int{"example.com/v1": 2 * n})
		})
	}
}

// expectNoneLost runs svm migrate on r, whose n objects are stored in v2
// and whose entries name the versions counted in entries (v1 among them,
// whose conversion needs the stopped webhook), on an API server of minor.
// Before 1.37 it must stop with ManagedFieldsAtRisk, naming v1; from 1.37
// on it must find every object already current. It must claim no loss,
// and etcd must hold every object as it was, managedFields included.
func expectNoneLost(t *testing.T, env *framework.Env, r framework.Resource, minor string, n int, entries map[string]int) {
	t.Helper()
	// wantReason is the reason svm migrate fails with; "" when it
	// succeeds.
	wantReason := ""
	if version.MustParseGeneric(minor).LessThan(version.MajorMinor(1, 37)) {
		wantReason = "ManagedFieldsAtRisk"
	}
	prefix := r.EtcdPrefix()
	if diff := cmp.Diff(entries, env.ManagedFieldsVersions(t, prefix)); diff != "" {
		t.Fatalf("etcd: versions managedFields name before (-want +got):\n%s", diff)
	}
	values, revisions := env.RawValues(t, prefix), env.ModRevisions(t, prefix)

	code, stdout, stderr := framework.RunSVM(t, env.KubeconfigFile(t), 3*time.Minute, "migrate", r.CRDName())
	t.Logf("svm migrate: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	switch {
	case wantReason == "" && code != 0:
		t.Errorf("svm migrate exited %d, want 0: the API server keeps the entries", code)
	case wantReason == "" && !strings.Contains(stdout, fmt.Sprintf("already current %d", n)):
		t.Errorf("svm migrate's summary %q: want every object already current", stdout)
	case wantReason != "" && code == 0:
		t.Errorf("svm migrate exited 0, want it to stop with %s", wantReason)
	case wantReason != "":
		for _, want := range []string{r.CRDName() + ": failed: " + wantReason, "kubernetes/kubernetes#136919", "example.com/v1"} {
			if !strings.Contains(stdout+stderr, want) {
				t.Errorf("svm migrate's output does not say %q", want)
			}
		}
	}
	if strings.Contains(stdout+stderr, "ManagedFieldsLost") {
		t.Errorf("svm migrate claims a loss")
	}

	// etcd, read straight: nothing written, nothing lost.
	if diff := cmp.Diff(entries, env.ManagedFieldsVersions(t, prefix)); diff != "" {
		t.Errorf("etcd: versions managedFields name after svm migrate (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(revisions, env.ModRevisions(t, prefix)); diff != "" {
		t.Errorf("etcd: objects written by svm migrate (mod revisions, -before +after):\n%s", diff)
	}
	after := env.RawValues(t, prefix)
	for _, key := range slices.Sorted(maps.Keys(values)) {
		if !bytes.Equal(values[key], after[key]) {
			t.Errorf("etcd: %s changed", key)
		}
	}
}

// namedBoth creates n objects of r whose entries name v1 and v2 and which
// are stored in v2, converted by a conversion webhook, and then stops the
// webhook. Each is created through v1 (its creator's entry names v1),
// then, once v2 is stored, labelled through v2 by another manager, which
// stores it in v2.
func namedBoth(t *testing.T, env *framework.Env, r framework.Resource, n int) {
	t.Helper()
	hook := storedInV2LabelledThrough(t, env, r, "v2", n)
	hook.Stop(t)
}

// namedUnserved creates n objects of r whose entries name v1 alone and
// which are stored in v2, converted by a conversion webhook; then it
// stops serving v1, which the CRD still defines, and stops the webhook.
// Each is created through v1 (its creator's entry names v1), then, once
// v2 is stored, labelled through v1 by another manager (whose entry names
// v1 too), which stores it in v2.
func namedUnserved(t *testing.T, env *framework.Env, r framework.Resource, n int) {
	t.Helper()
	hook := storedInV2LabelledThrough(t, env, r, "v1", n)
	unserve(t, env, r, "v1")
	hook.Stop(t)
}

// storedInV2LabelledThrough creates n objects of r through v1, makes v2
// the storage version with a conversion webhook, which it returns
// running, and labels each object through through as manager bob, which
// stores it in v2.
func storedInV2LabelledThrough(t *testing.T, env *framework.Env, r framework.Resource, through string, n int) *framework.ConversionWebhook {
	t.Helper()
	namespaces := []string{"ns-a", "ns-b"}
	env.CreateResource(t, r)
	env.CreateObjects(t, r, namespaces, n)
	hook := env.StartConversionWebhook(t, r)
	env.SetStorage(t, r, "v2")
	env.WaitWritesStoredIn(t, r, "v2")
	ctx := framework.Context(t, 5*time.Minute)
	for i := range n {
		ns, name := namespaces[i%len(namespaces)], fmt.Sprintf("obj-%05d", i)
		_, err := env.Dynamic.Resource(r.GVR(through)).Namespace(ns).Patch(ctx, name, types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"labelled":"by-bob"}}}`), metav1.PatchOptions{FieldManager: "bob"})
		if err != nil {
			t.Fatalf("label %s/%s through %s: %v", ns, name, through, err)
		}
	}
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{"example.com/v2": n})
	return hook
}

// unserve sets served: false on version v of r's CRD, which keeps
// defining it, and waits until discovery no longer lists it.
func unserve(t *testing.T, env *framework.Env, r framework.Resource, v string) {
	t.Helper()
	ctx := framework.Context(t, time.Minute)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx, client.ObjectKey{Name: r.CRDName()}, crd); err != nil {
			return err
		}
		for i := range crd.Spec.Versions {
			if crd.Spec.Versions[i].Name == v {
				crd.Spec.Versions[i].Served = false
			}
		}
		return env.Client.Update(ctx, crd)
	})
	if err != nil {
		t.Fatalf("stop serving %s of %s: %v", v, r.CRDName(), err)
	}
	gv := r.GVR(v).GroupVersion().String()
	for {
		groups, err := env.Discovery.ServerGroups()
		if err == nil && !slices.ContainsFunc(groups.Groups, func(g metav1.APIGroup) bool {
			return slices.ContainsFunc(g.Versions, func(d metav1.GroupVersionForDiscovery) bool { return d.GroupVersion == gv })
		}) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("discovery still lists %s a minute after the CRD stopped serving it (last error: %v)", gv, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
