package migration

import (
	"context"

	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	"k8s.io/klog/v2"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/intree"
)

// deleteAbandoned deletes the in-tree migrations svm created for svm
// migrations that are gone or being deleted (intree.Abandoned): superseded
// by the trigger, or deleted by a user, whether a run of theirs was under
// way or not. Their owner reference leaves them to the garbage collector,
// which runs in kube-controller-manager: with it stopped they would stay,
// and it would run them when it starts again. A failure is logged; the
// next call tries again.
func (r *Reconciler) deleteAbandoned(ctx context.Context, migrations []migrationv1alpha1.StorageVersionMigration, inTree []storagemigrationv1.StorageVersionMigration) {
	if !r.InTreeServed || len(inTree) == 0 {
		// Nothing to look up: the map of every migration's uid, built
		// per schedule, was a tenth of svm's allocations over a flip of
		// 1,000 CRDs.
		return
	}
	owners := make(map[string]bool, len(migrations))
	for i := range migrations {
		if migrations[i].DeletionTimestamp == nil {
			owners[string(migrations[i].UID)] = true
		}
	}
	for _, it := range intree.Abandoned(inTree, owners) {
		log := klog.FromContext(ctx).WithValues("inTreeMigration", klog.KObj(it), "migrationUID", it.Annotations[intree.ForMigrationAnnotation])
		if err := intree.Delete(ctx, r.Client, it); err != nil {
			log.Error(err, "Could not delete an in-tree migration whose svm migration is gone")
			continue
		}
		log.Info("Deleted an in-tree migration whose svm migration is gone")
	}
}
