package trigger_test

import (
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/svm-project/svm/internal/kubeclients"
	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/framework"
)

// TestTriggerReadsTheAPIServersClock: svm controller on a clock 5 minutes
// fast (faked with kubeclients.SkewEnv). The trigger records when it saw a
// storage flip (currentStorageVersionSince) on the API server's clock,
// within seconds of the flip as the server dates it; on its own clock that
// would be 5 minutes ahead of the creationTimestamp of the migration it
// makes after the settle delay and the drain margin, which would then not
// count as made since the flip for 5 minutes, nor storedVersions be pruned.
func TestTriggerReadsTheAPIServersClock(t *testing.T) {
	t.Parallel()
	const skew = 5 * time.Minute
	r := framework.Resource{Group: "fastclock.svm.test", Plural: "gadgets", Kind: "Gadget"}
	hash := func(version string) string { return resources.StorageVersionHash(r.Group, version, r.Kind) }
	env := framework.Start(t, controlplane.Options{})
	env.InstallCRDs(t, framework.CRDBasesDir())
	env.CreateResource(t, r)
	env.CreateObjects(t, r, []string{"qa"}, 20)
	env.StartSVMWithEnv(t, []string{kubeclients.SkewEnv + "=" + skew.String()},
		framework.ControllerArgs("--leader-elect=false", "--trigger-interval", "120s", "--crd-settle-delay", "2s")...)
	gr := r.GVR("v1").GroupResource()
	env.WaitStorageState(t, gr, 2*time.Minute, "first sight migrated", persisted(hash("v1")))

	env.SetStorage(t, r, "v2")
	// Well within the skew: on svm's own clock nothing counts before it.
	env.WaitPrunedSafely(t, r, "v1", 2*time.Minute)
	s := env.WaitStorageState(t, gr, time.Minute, "only v2 persisted", persisted(hash("v2")))
	env.ExpectStored(t, r.EtcdPrefix(), map[string]int{r.Group + "/v2": 20})

	flipped := specChanged(t, env, r.CRDName())
	since := s.Status.CurrentStorageVersionSince
	if since == nil {
		t.Fatal("the StorageState records no currentStorageVersionSince")
	}
	// The server dates to the second, and svm's reading of its clock is
	// never ahead and at most a second and a round trip behind.
	if d := since.Sub(flipped); d < -2*time.Second || d > 15*time.Second {
		t.Errorf("currentStorageVersionSince %s is %s off the flip (%s, the API server's clock): want the server's clock, not svm's %s fast one",
			since.UTC(), d, flipped.UTC(), skew)
	}
	if m := lastSucceeded(t, env, r.Plural); m.CreationTimestamp.Before(since) {
		t.Errorf("the migration that vouched for v2 was created at %s, before currentStorageVersionSince %s", m.CreationTimestamp.UTC(), since.UTC())
	}
}

// specChanged is when the named CRD's spec last changed, on the API
// server's clock: its latest managedFields entry of the CRD itself.
func specChanged(t *testing.T, env *framework.Env, name string) time.Time {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(framework.Context(t, time.Minute), client.ObjectKey{Name: name}, crd); err != nil {
		t.Fatalf("get CRD %s: %v", name, err)
	}
	var changed time.Time
	for _, e := range crd.ManagedFields {
		if e.Subresource == "" && e.Time != nil && e.Time.After(changed) {
			changed = e.Time.Time
		}
	}
	if changed.IsZero() {
		t.Fatalf("CRD %s has no managedFields entry dating its spec", name)
	}
	return changed
}
