package storagestate

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/crdversions"
	"github.com/svm-project/svm/internal/intree"
	"github.com/svm-project/svm/internal/operation"
	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/internal/trigger"
)

// apply carries out a decision: stop svm's stale migrations, write the
// state, then create the migration.
//
// It returns when to decide again for a step that had to wait: pruning
// while an in-tree migration of the resource is Running, which
// kube-controller-manager prunes for itself when it ends.
func (c *Controller) apply(ctx context.Context, gr schema.GroupResource, state *migrationv1alpha1.StorageState, crd *apiextensionsv1.CustomResourceDefinition,
	migrations []migrationv1alpha1.StorageVersionMigration, d trigger.Decision) (time.Duration, error) {
	if err := c.stopSuperseded(ctx, gr, migrations, d); err != nil {
		return 0, err
	}
	if d.RecordRevision {
		d = c.recordRevision(ctx, gr, state, d)
	}
	state, err := c.writeState(ctx, gr, state, d)
	if err != nil {
		return 0, err
	}
	var requeue time.Duration
	if d.PruneStoredVersions && c.PruneStoredVersions {
		if requeue, err = c.prune(ctx, gr, state, crd); err != nil {
			return 0, err
		}
	}
	if d.CreateMigrationFor != nil {
		return requeue, c.createMigration(ctx, gr, state, *d.CreateMigrationFor, d.Reason, crd)
	}
	return requeue, nil
}

// recordRevision reads the current etcd revision into the status d
// writes, as its CurrentStorageVersionRevision: the resourceVersion of a
// list of the resource, read after every API server was known to store it
// in the current version, is newer than any write in another. When it
// cannot be read, d is left as it was: the migration then writes every
// object, as without it. Decide asks for it only when there is a status,
// written or kept, to hold it.
func (c *Controller) recordRevision(ctx context.Context, gr schema.GroupResource, state *migrationv1alpha1.StorageState, d trigger.Decision) trigger.Decision {
	version := c.versions[gr]
	if version == "" || c.Metadata == nil {
		return d
	}
	list, err := c.Metadata.Resource(gr.WithVersion(version)).List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Read the revision since which every API server stores the resource in its current version; its migration writes every object", "resource", gr)
		return d
	}
	if d.Status == nil {
		d.Status = state.Status.DeepCopy()
	}
	d.Status.CurrentStorageVersionRevision = list.ResourceVersion
	return d
}

// stopSuperseded deletes the migrations the decision stops.
func (c *Controller) stopSuperseded(ctx context.Context, gr schema.GroupResource, migrations []migrationv1alpha1.StorageVersionMigration, d trigger.Decision) error {
	for _, name := range d.DeleteMigrations {
		m := &migrationv1alpha1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if i := slices.IndexFunc(migrations, func(m migrationv1alpha1.StorageVersionMigration) bool { return m.Name == name }); i >= 0 {
			m = &migrations[i]
		}
		if err := c.Client.Delete(ctx, m); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("stop migration %s: %w", name, err)
		}
		c.event(m, nil, corev1.EventTypeNormal, ReasonSuperseded, "Delete", supersededNote(d))
		klog.FromContext(ctx).Info("Stopped migration for a previous storage version", "resource", gr, "migration", name)
	}
	return nil
}

// writeState creates or updates the StorageState as decided and returns
// it as written (state itself when the decision leaves it alone).
func (c *Controller) writeState(ctx context.Context, gr schema.GroupResource, state *migrationv1alpha1.StorageState, d trigger.Decision) (*migrationv1alpha1.StorageState, error) {
	switch {
	case d.CreateState:
		created, err := c.createState(ctx, migrationv1alpha1.GroupResource{Group: gr.Group, Resource: gr.Resource}, d.Status)
		if err != nil {
			return nil, err
		}
		c.record(gr, created, nil, createdTransition(d.Status))
		return created, nil
	case d.Status != nil:
		updated := state.DeepCopy()
		updated.Status = *d.Status
		// Update carries the resourceVersion read: a concurrent change
		// makes this round's decision moot, and the next round re-decides.
		if err := c.Client.Status().Update(ctx, updated, client.FieldOwner(FieldManager)); err != nil {
			return nil, fmt.Errorf("update storage state: %w", err)
		}
		for _, t := range statusTransitions(&state.Status, d.Status) {
			c.record(gr, updated, nil, t)
		}
		return updated, nil
	}
	return state, nil
}

// prune cuts the CRD's storedVersions, unless an in-tree migration of the
// resource is Running: it returns pruneWait then.
func (c *Controller) prune(ctx context.Context, gr schema.GroupResource, state *migrationv1alpha1.StorageState, crd *apiextensionsv1.CustomResourceDefinition) (time.Duration, error) {
	holder, err := c.inTreeHolder(ctx, gr)
	switch {
	case err != nil:
		return 0, err
	case holder != "":
		// Both would prune: wait, and see what is left after it.
		klog.FromContext(ctx).Info("Not pruning storedVersions while an in-tree migration of the resource is running", "crd", klog.KObj(crd), "inTreeMigration", holder)
		return pruneWait, nil
	}
	return 0, c.pruneStoredVersions(ctx, gr, state, crd)
}

// pruneWait is how soon pruning is decided again after an in-tree
// migration of the resource held it back.
const pruneWait = 15 * time.Second

// inTreeHolder names the in-tree migration of gr that is Running, "" when
// none is or the in-tree API is not served.
func (c *Controller) inTreeHolder(ctx context.Context, gr schema.GroupResource) (string, error) {
	migrations, err := intree.List(ctx, c.Reader, true, c.InTreeBetaServed)
	if err != nil {
		return "", err
	}
	if h := intree.Holder(migrations, gr, ""); h != nil {
		return h.Name, nil
	}
	return "", nil
}

func supersededNote(d trigger.Decision) string {
	if d.Status != nil && d.Status.CurrentStorageVersionHash == migrationv1alpha1.UnknownStorageVersionHash {
		return "Stopped by the trigger: API servers disagree on the storage version; a new migration starts when they agree"
	}
	if d.CreateMigrationFor != nil {
		return "Stopped by the trigger: superseded by a migration to storage version hash " + *d.CreateMigrationFor
	}
	return "Stopped by the trigger: superseded by a newer storage version"
}

// noteRetry records an event the first time a resource is seen waiting
// for a retry after its migrations failed; a wait for a CRD's change to
// settle is no retry, and says nothing.
func (c *Controller) noteRetry(gr schema.GroupResource, state *migrationv1alpha1.StorageState, d trigger.Decision, now time.Time) {
	if d.RequeueAfter <= 0 || !d.Retry || state == nil {
		delete(c.retries, gr)
		return
	}
	// The due time is the last failure's end plus the backoff, the same
	// in every round (now is the decision's): the key repeats, and the
	// event is not.
	due := now.Add(d.RequeueAfter)
	key := retryKey(state.Status.CurrentStorageVersionHash, due)
	if c.retries[gr] == key {
		return
	}
	c.retries[gr] = key
	c.event(state, nil, corev1.EventTypeWarning, ReasonRetryScheduled, "ScheduleRetry",
		fmt.Sprintf("The last migration to storage version hash %s failed; a new one starts in %s (at %s)",
			state.Status.CurrentStorageVersionHash, d.RequeueAfter.Round(time.Second), due.UTC().Format(time.RFC3339)))
}

// crdStorage is what a CRD says about the versions its objects are stored in.
func crdStorage(crd *apiextensionsv1.CustomResourceDefinition) *trigger.CRDStorage {
	if crd == nil {
		return nil
	}
	s := crdversions.Of(crd)
	out := &trigger.CRDStorage{Generation: crd.Generation}
	if s.StorageVersion != "" {
		out.StorageHash = resources.StorageVersionHash(crd.Spec.Group, s.StorageVersion, crd.Spec.Names.Kind)
	}
	for _, v := range s.Besides() {
		out.StoredHashes = append(out.StoredHashes, resources.StorageVersionHash(crd.Spec.Group, v, crd.Spec.Names.Kind))
	}
	return out
}

// pruneStoredVersions cuts status.storedVersions to the storage version,
// with the write every prune of svm's makes (operation.PruneStoredVersions).
// It carries the resourceVersion read with the decision, so a CRD changed
// since (its storage version, say) is left alone: the next round decides
// again.
func (c *Controller) pruneStoredVersions(ctx context.Context, gr schema.GroupResource, state *migrationv1alpha1.StorageState, crd *apiextensionsv1.CustomResourceDefinition) error {
	pruned, err := operation.PruneStoredVersions(ctx, c.CRDs, crd, FieldManager)
	if err != nil {
		return fmt.Errorf("prune storedVersions of %s: %w", crd.Name, err)
	}
	c.record(gr, state, pruned, prunedTransition(crd.Name, crd.Status.StoredVersions, pruned.Status.StoredVersions))
	klog.FromContext(ctx).Info("Pruned storedVersions", "crd", klog.KObj(crd), "from", crd.Status.StoredVersions, "to", pruned.Status.StoredVersions)
	return nil
}

func (c *Controller) createState(ctx context.Context, r migrationv1alpha1.GroupResource, status *migrationv1alpha1.StorageStateStatus) (*migrationv1alpha1.StorageState, error) {
	s := &migrationv1alpha1.StorageState{
		ObjectMeta: metav1.ObjectMeta{Name: migrationv1alpha1.StorageStateName(r)},
		Spec:       migrationv1alpha1.StorageStateSpec{Resource: r},
	}
	if err := c.Client.Create(ctx, s, client.FieldOwner(FieldManager)); err != nil {
		return nil, fmt.Errorf("create storage state %s: %w", s.Name, err)
	}
	// Status is a subresource: it is written separately.
	s.Status = *status
	if err := c.Client.Status().Update(ctx, s, client.FieldOwner(FieldManager)); err != nil {
		return nil, fmt.Errorf("set status of storage state %s: %w", s.Name, err)
	}
	klog.FromContext(ctx).Info("Created storage state", "storageState", klog.KObj(s), "current", status.CurrentStorageVersionHash)
	return s, nil
}

func (c *Controller) createMigration(ctx context.Context, gr schema.GroupResource, state *migrationv1alpha1.StorageState, hash, reason string, crd *apiextensionsv1.CustomResourceDefinition) error {
	version, ok := c.versions[gr]
	if !ok {
		return nil // not discovered since start; the next round creates it
	}
	m := &migrationv1alpha1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: migrationv1alpha1.StorageStateName(migrationv1alpha1.GroupResource{Group: gr.Group, Resource: gr.Resource}) + "-",
			Labels:       map[string]string{trigger.CreatedByLabel: trigger.CreatedByValue},
			Annotations:  map[string]string{trigger.TargetHashAnnotation: hash, trigger.ReasonAnnotation: reason},
		},
		Spec: migrationv1alpha1.StorageVersionMigrationSpec{
			Resource:      migrationv1alpha1.GroupVersionResource{Group: gr.Group, Version: version, Resource: gr.Resource},
			ThroughStatus: c.ThroughStatus,
		},
	}
	if crd != nil {
		m.Annotations[trigger.CRDGenerationAnnotation] = strconv.FormatInt(crd.Generation, 10)
	}
	if err := c.Client.Create(ctx, m, client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("create migration: %w", err)
	}
	if state != nil {
		c.event(state, m, corev1.EventTypeNormal, ReasonMigrationCreated, "CreateMigration", fmt.Sprintf("Created migration %s to storage version hash %s", m.Name, hash))
	}
	klog.FromContext(ctx).Info("Created migration", "migration", klog.KObj(m), "resource", gr, "storageVersionHash", hash, "reason", reason)
	return nil
}
