package storagestate

import (
	"context"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
)

// TestFailedApplyIsDecidedAgainSoon: a write of a decision that fails (a
// conflict with another writer) brings the next round within applyRetry,
// not at the next discovery an interval later, since no change may come
// to ask for it, and twice as late after a second failure in a row; the
// round after the trouble carries the decision out.
func TestFailedApplyIsDecidedAgainSoon(t *testing.T) {
	k := newCluster(t)
	failing := true
	k.c.Client = interceptor.NewClient(k.client.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*migrationv1alpha1.StorageVersionMigration); ok && failing {
				return apierrors.NewConflict(schema.GroupResource{Group: migrationv1alpha1.GroupVersion.Group, Resource: "storageversionmigrations"}, obj.GetName(), nil)
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	k.serve("cm1", "w1")
	expectRequeue(t, k.reconcile(), applyRetry)
	if got := k.migrations("widgets.example.com"); len(got) != 0 {
		t.Fatalf("migrations %v created while creation failed", got)
	}

	// A second failure in a row waits twice as long.
	k.clock.Step(applyRetry)
	expectRequeue(t, k.reconcile(), 2*applyRetry)

	failing = false
	k.clock.Step(2 * applyRetry)
	expectRequeue(t, k.reconcile(), interval-3*applyRetry)
	for resource, hash := range map[string]string{"configmaps": "cm1", "widgets.example.com": "w1"} {
		if got := k.migrations(resource)[hash]; len(got) != 1 {
			t.Errorf("%d migrations of %s to %s after the retry, want 1", len(got), resource, hash)
		}
	}
}
