package history

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/metrics"
)

// resourceIndex indexes the manager's cache of migrations by the
// resource they migrate (indexKey), so that a look at one resource reads
// its migrations alone.
const resourceIndex = "svm.history.spec.resource"

// Controller deletes the finished migrations of a resource that its
// Policy does not keep. Its requests name a resource: the group as the
// namespace, the resource as the name.
//
// +kubebuilder:rbac:groups=migration.k8s.io,resources=storageversionmigrations,verbs=list;watch;delete
type Controller struct {
	// Client is the manager's: it reads from the manager's cache and
	// deletes through the API server.
	Client  client.Client
	Policy  Policy
	Metrics *metrics.Metrics
}

// SetupWithManager indexes the manager's cache of migrations by resource
// and adds the controller, which runs with leadership. A resource is
// looked at when one of its migrations is seen finished: once for every
// resource with a finished migration as the cache fills at start, then
// when one finishes (or is created finished). Deletions and the updates
// of running migrations ask for no look.
func (c *Controller) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &migrationv1alpha1.StorageVersionMigration{}, resourceIndex, func(o client.Object) []string {
		return []string{indexKey(o.(*migrationv1alpha1.StorageVersionMigration))}
	}); err != nil {
		return fmt.Errorf("index migrations by resource: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("history").
		Watches(&migrationv1alpha1.StorageVersionMigration{},
			handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
				gr := o.(*migrationv1alpha1.StorageVersionMigration).Spec.Resource.GroupResource()
				return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: gr.Group, Name: gr.Resource}}}
			}),
			builder.WithPredicates(predicate.Funcs{
				CreateFunc:  func(e event.CreateEvent) bool { return finished(e.Object) },
				UpdateFunc:  func(e event.UpdateEvent) bool { return finished(e.ObjectNew) && !finished(e.ObjectOld) },
				DeleteFunc:  func(event.DeleteEvent) bool { return false },
				GenericFunc: func(event.GenericEvent) bool { return false },
			})).
		Complete(c)
}

// finished reports whether o is a finished migration not being deleted.
func finished(o client.Object) bool {
	m, ok := o.(*migrationv1alpha1.StorageVersionMigration)
	return ok && m.IsFinished() && m.DeletionTimestamp == nil
}

func indexKey(m *migrationv1alpha1.StorageVersionMigration) string {
	return m.Spec.Resource.Group + "/" + m.Spec.Resource.Resource
}

// Reconcile deletes the finished migrations of the request's resource
// that the policy does not keep, reading them from the cache. A migration
// changed or gone since the cache's copy is left: a change that matters
// (one more finished) brings another look.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var list migrationv1alpha1.StorageVersionMigrationList
	if err := c.Client.List(ctx, &list, client.MatchingFields{resourceIndex: req.Namespace + "/" + req.Name}); err != nil {
		return reconcile.Result{}, fmt.Errorf("list migrations: %w", err)
	}
	var deleted []string
	defer func() {
		if len(deleted) > 0 {
			klog.FromContext(ctx).Info("deleted finished migrations beyond the history kept", "resource", schema.GroupResource{Group: req.Namespace, Resource: req.Name}.String(), "migrations", deleted)
		}
	}()
	for _, m := range Expired(c.Policy, list.Items) {
		uid, rv := m.UID, m.ResourceVersion
		err := c.Client.Delete(ctx, m, client.Preconditions{UID: &uid, ResourceVersion: &rv})
		switch {
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			continue
		case err != nil:
			return reconcile.Result{}, fmt.Errorf("delete finished migration %s: %w", m.Name, err)
		}
		status := metrics.StatusSucceeded
		if Failed(m) {
			status = metrics.StatusFailed
		}
		c.Metrics.FinishedMigrationDeleted(m.Spec.Resource.GroupResource(), status)
		deleted = append(deleted, m.Name)
	}
	return reconcile.Result{}, nil
}
