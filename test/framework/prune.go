package framework

import (
	"context"
	"slices"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// WaitPrunedSafely waits up to timeout for r's CRD to stop listing version
// in status.storedVersions, and then reads etcd at once: a value still
// stored in version is one the prune left behind, which the API server
// cannot read once version is removed from the CRD. It fails the test
// either way, and returns the stored versions read at the prune. The
// caller must keep every other writer of version away meanwhile, so that
// what etcd holds just after the prune is what it held at it.
func (e *Env) WaitPrunedSafely(t testing.TB, r Resource, version string, timeout time.Duration) map[string]int {
	t.Helper()
	var stored []string
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := e.Client.Get(ctx, client.ObjectKey{Name: r.CRDName()}, crd); err != nil {
			return false, nil // the next poll reads again
		}
		stored = crd.Status.StoredVersions
		return !slices.Contains(stored, version), nil
	})
	if err != nil {
		t.Fatalf("storedVersions of %s still list %s after %s (%v): %v", r.CRDName(), version, timeout, stored, err)
	}
	counts := e.StoredVersions(t, r.EtcdPrefix())
	if n := counts[r.Group+"/"+version]; n > 0 {
		t.Errorf("storedVersions of %s pruned to %v while etcd held %d objects stored in %s (%v): the API server cannot read them once %s is removed",
			r.CRDName(), stored, n, version, counts, version)
	}
	return counts
}
