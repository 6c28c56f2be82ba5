package migration

import (
	"context"
	"fmt"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
)

// migrationList reads every migration for a scheduling call. Every call
// reads them all, and after a bulk flip there are thousands of calls:
// copying the objects deeply each time would cost the square of their
// number, and even controller-runtime's List without copies allocates a
// new slice of every object by value each call (two fifths of all svm
// allocated at 1,000 CRDs, in garbage for the collector to chase). The
// items are the cache's own objects, copied shallowly into a slice kept
// from call to call: read and never modified, and never kept past the
// call (what a run is handed is a deep copy). Calls come one at a time
// (MaxConcurrentReconciles 1), so the slice is never read by two.
type migrationList struct {
	// store is the migrations' informer's; nil reads through the client
	// instead (a reconciler built without a manager, in tests).
	store toolscache.Store
	items []migrationv1alpha1.StorageVersionMigration
}

// read returns every migration in the cache. The slice is valid until
// the next call.
func (l *migrationList) read(ctx context.Context, c client.Reader) ([]migrationv1alpha1.StorageVersionMigration, error) {
	if l.store == nil {
		var list migrationv1alpha1.StorageVersionMigrationList
		if err := c.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("list migrations: %w", err)
		}
		return list.Items, nil
	}
	objects := l.store.List()
	// Clear what the last call left, so that no stale copy keeps an
	// object the cache has let go of.
	clear(l.items[:cap(l.items)])
	l.items = l.items[:0]
	for _, o := range objects {
		if m, ok := o.(*migrationv1alpha1.StorageVersionMigration); ok {
			l.items = append(l.items, *m)
		}
	}
	return l.items, nil
}
