package intree

import (
	"context"
	"fmt"

	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Abandoned are the in-tree migrations svm's executor created (CreatedByLabel)
// whose svm migration is gone: none of owners, the uids of the svm migrations
// that exist and are not being deleted, is the one ForMigrationAnnotation
// names. Their owner reference has the garbage collector delete them, but
// only while kube-controller-manager runs: one stopped or restarting would
// find them still there and run them, stamping the CRD's generation of that
// moment and pruning its storedVersions outside any run of svm's. svm deletes
// them itself. Those being deleted already are left out.
func Abandoned(ms []storagemigrationv1.StorageVersionMigration, owners map[string]bool) []*storagemigrationv1.StorageVersionMigration {
	var out []*storagemigrationv1.StorageVersionMigration
	for i := range ms {
		m := &ms[i]
		if m.Labels[CreatedByLabel] != CreatedByExecutor || m.DeletionTimestamp != nil || owners[m.Annotations[ForMigrationAnnotation]] {
			continue
		}
		out = append(out, m)
	}
	return out
}

// Delete deletes the in-tree migration m, and only it: the delete carries
// its uid as a precondition, so that one created again under its name is
// left alone. Gone already, or replaced, is no error.
func Delete(ctx context.Context, c client.Writer, m *storagemigrationv1.StorageVersionMigration) error {
	obj := &storagemigrationv1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: m.Name}}
	uid := m.UID
	err := c.Delete(ctx, obj, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return nil
	case apierrors.IsConflict(err):
		// The precondition failed: the name holds another object now.
		return nil
	}
	return fmt.Errorf("delete the in-tree migration %s: %w", m.Name, err)
}
