package retire_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/svm-project/svm/pkg/migrate"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// bodies records the bodies of the writes that reach the API server.
type bodies struct {
	mu  sync.Mutex
	all []string
}

func (b *bodies) record(r *http.Request) (int, http.Header, bool) {
	if r.Body == nil || (r.Method != http.MethodPatch && r.Method != http.MethodPut) {
		return 0, nil, false
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return http.StatusBadRequest, nil, true
	}
	r.Body = io.NopCloser(bytes.NewReader(raw))
	b.mu.Lock()
	defer b.mu.Unlock()
	b.all = append(b.all, r.Method+" "+r.URL.Path+" "+string(raw))
	return 0, nil, false
}

func (b *bodies) get() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.all...)
}

// TestRetireNeverClearsManagedFields: an object all of whose entries would
// once have been emptied (its one manager owned only the field the
// conversion moves) has them moved; objects none of whose entries can be
// placed in v2 (the API server refuses the dry run; an entry owns a list
// item and no field of it) keep them as they were and are reported, by
// Retire and by svm retire, which then leave storedVersions as they are:
// pruning them would let v1 be removed while entries name it. No write svm
// sends carries managedFields [{}], which would clear them.
func TestRetireNeverClearsManagedFields(t *testing.T) {
	t.Parallel()
	env := framework.Shared(t, controlplane.Options{})
	r := framework.Resource{Group: framework.TestName(t) + ".example.com", Plural: "widgets", Kind: "Widget"}
	env.CreateRenamingResource(t, r)
	env.StartRenamingConversionWebhook(t, r)
	ns := framework.TestName(t)
	env.CreateNamespace(t, ns)
	for name, spec := range map[string]map[string]any{
		"moved":    {"replicas": int64(3)},
		"refused":  {"color": "red"},
		"unplaced": {"ports": []any{map[string]any{"name": "https"}}},
	} {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": r.Group + "/v1", "kind": r.Kind, "metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec,
		}}
		if _, err := env.Dynamic.Resource(r.GVR("v1")).Namespace(ns).Apply(framework.Context(t, time.Minute), name, obj, metav1.ApplyOptions{FieldManager: alice}); err != nil {
			t.Fatalf("apply %s: %v", name, err)
		}
	}
	// A policy that refuses the dry runs on one object, and lets its
	// ordinary writes through.
	framework.StartAdmissionWebhook(t, env, framework.AdmissionHook{Resource: r,
		Review: func(_ context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
			if req.Name == "refused" && req.DryRun != nil && *req.DryRun {
				return &admissionv1.AdmissionResponse{Result: &metav1.Status{Code: http.StatusForbidden, Message: "test policy refuses dry runs"}}
			}
			return &admissionv1.AdmissionResponse{Allowed: true}
		}})
	env.SetStorage(t, r, "v2")
	before := ownedByObject(t, env, r, "v2")

	proxy := env.StartProxy(t)
	var writes bodies
	proxy.Intercept(writes.record)
	res, err := migrate.Retire(framework.Context(t, 3*time.Minute), proxy.Config, r.GVR("v1"), migrate.RetireOptions{Options: migrate.Options{CRDDrainMargin: framework.TestDrainMargin}})
	if !errors.Is(err, migrate.ErrManagedFieldsLeft) {
		t.Fatalf("Retire = %v, want ErrManagedFieldsLeft", err)
	}
	expectLeftReported(t, res, ns)
	for _, w := range writes.get() {
		if strings.Contains(w, `"managedFields":[{}]`) || strings.Contains(w, `"managedFields":[]`) {
			t.Errorf("svm sent a write that clears managedFields: %s", w)
		}
	}
	if len(writes.get()) == 0 {
		t.Error("no write reached the API server through the proxy: the check proves nothing")
	}

	// In etcd: every object is stored anew in v2, those whose entries
	// stayed too; the two keep their entries as they were, naming v1; the
	// third's moved, its field where v2 has it.
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": 3})
	after := ownedByObject(t, env, r, "v2")
	for _, name := range []string{"refused", "unplaced"} {
		if diff := cmp.Diff(before[ns+"/"+name], after[ns+"/"+name]); diff != "" {
			t.Errorf("%s: entries changed (-before +after):\n%s", name, diff)
		}
	}
	if diff := cmp.Diff(before[ns+"/moved"].inV2(r.Group), after[ns+"/moved"]); diff != "" {
		t.Errorf("moved: entries (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int{r.Group + "/v1": 2, r.Group + "/v2": 1}, env.ManagedFieldsVersions(t, r.EtcdPrefix())); diff != "" {
		t.Errorf("etcd: versions managedFields name (-want +got):\n%s", diff)
	}
	// Nothing is stored in v1, but two entries name it: it must not
	// become removable.
	if got := env.CRDStoredVersions(t, r.CRDName()); !slices.Equal(got, []string{"v1", "v2"}) {
		t.Errorf("storedVersions %v, want [v1 v2] while entries name v1", got)
	}

	// svm retire says the same, and fails.
	code, out, errOut := framework.RunSVM(t, env.KubeconfigFile(t), 3*time.Minute, "retire", "widgets.v1."+r.Group, "--crd-drain-margin", framework.TestDrainMargin.String())
	if code != 1 {
		t.Errorf("svm retire with entries it cannot move: exit %d, want 1\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"left " + ns + "/refused: entry of alice (Apply): Refused: ", "test policy refuses dry runs",
		"left " + ns + "/unplaced: entry of alice (Apply): Unplaced: ",
		"entries left naming a retired version 2 (Refused 1, Unplaced 1)",
		"not done: managedFields entries still name it",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("svm retire does not say %q:\n%s", want, out)
		}
	}
}

// expectLeftReported checks that Retire counted and named the two entries
// it left, with their reasons, and moved the third object's.
func expectLeftReported(t *testing.T, res migrate.RetireResult, ns string) {
	t.Helper()
	m := res.Migration
	if m == nil {
		t.Fatal("Retire reports no migration")
	}
	if diff := cmp.Diff(migrate.LeftCounts{Refused: 1, Unplaced: 1}, m.ManagedFieldsLeft); diff != "" {
		t.Errorf("entries left, by reason (-want +got):\n%s", diff)
	}
	if m.ManagedFieldsRewritten != 1 || m.Failed != 0 || res.Pruned {
		t.Errorf("counts %+v, pruned %v: want the one object's entries moved, none failed, storedVersions kept while entries name v1", m.Counts, res.Pruned)
	}
	got := map[string]string{}
	for _, l := range m.LeftEntries {
		got[l.Namespace+"/"+l.Name] = l.Manager + " " + l.Operation + " " + l.APIVersion + " " + l.Reason
		if l.Message == "" {
			t.Errorf("%s/%s: left with no message", l.Namespace, l.Name)
		}
	}
	want := map[string]string{
		ns + "/refused":  alice + " Apply " + res.Resource.GroupVersion().String() + " Refused",
		ns + "/unplaced": alice + " Apply " + res.Resource.GroupVersion().String() + " Unplaced",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("entries left (-want +got):\n%s", diff)
	}
}
