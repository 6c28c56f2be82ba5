package encryption

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/internal/rotation"
)

// apply carries out a decision: stop svm's superseded re-encryptions,
// write the status, then create the migration. It returns what the
// StorageState records after it.
func (c *Controller) apply(ctx context.Context, r resources.Resource, state *migrationv1alpha1.StorageState,
	migrations []migrationv1alpha1.StorageVersionMigration, d rotation.Decision) (*migrationv1alpha1.StorageEncryption, error) {
	recorded := state.Status.Encryption
	if err := c.stopSuperseded(ctx, r, migrations, d.DeleteMigrations); err != nil {
		return recorded, err
	}
	if d.Status != nil {
		updated, err := c.writeStatus(ctx, state, d.Status)
		if err != nil {
			return recorded, err
		}
		state, recorded = updated, updated.Status.Encryption
		if !d.CreateMigration && !d.Rewritten && d.Status.ConfigHash == "" && d.Status.Message != "" {
			c.event(state, nil, corev1.EventTypeNormal, ReasonWaiting, "Wait", d.Status.Message)
		}
	}
	if d.Rewritten {
		c.event(state, nil, corev1.EventTypeNormal, ReasonReencrypted, "Record", d.Status.Message)
		klog.FromContext(ctx).Info("Re-encryption recorded", "resource", r.GroupResource(),
			"configHash", d.Status.RewrittenConfigHash, "migration", d.Status.RewrittenBy)
	}
	if d.CreateMigration {
		if err := c.createMigration(ctx, r, state, recorded.ConfigHash, recorded.KMSKeys); err != nil {
			return recorded, err
		}
	}
	return recorded, nil
}

// stopSuperseded deletes the named re-encryptions of r, which were made
// under a configuration the API servers no longer agree on.
func (c *Controller) stopSuperseded(ctx context.Context, r resources.Resource, migrations []migrationv1alpha1.StorageVersionMigration, names []string) error {
	for _, name := range names {
		i := slices.IndexFunc(migrations, func(m migrationv1alpha1.StorageVersionMigration) bool { return m.Name == name })
		m := &migrations[i]
		if err := c.Client.Delete(ctx, m, client.Preconditions{UID: &m.UID}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("stop re-encryption %s: %w", name, err)
		}
		under := m.Annotations[rotation.ConfigHashAnnotation]
		if keys := m.Annotations[rotation.KMSKeysAnnotation]; keys != "" {
			under += " with KMS v2 keys " + keys
		}
		c.event(m, nil, corev1.EventTypeNormal, ReasonSuperseded, "Delete",
			"Stopped: the API servers no longer agree on the configuration "+under)
		klog.FromContext(ctx).Info("Stopped a re-encryption under a configuration the API servers no longer agree on",
			"resource", r.GroupResource(), "migration", name)
	}
	return nil
}

// writeStatus sets status.encryption of a StorageState. The update
// carries the resourceVersion read: a state changed since (by the
// trigger, say) makes the write fail, and a look soon after decides again.
func (c *Controller) writeStatus(ctx context.Context, state *migrationv1alpha1.StorageState, e *migrationv1alpha1.StorageEncryption) (*migrationv1alpha1.StorageState, error) {
	updated := state.DeepCopy()
	updated.Status.Encryption = e.DeepCopy()
	if err := c.Client.Status().Update(ctx, updated, client.FieldOwner(FieldManager)); err != nil {
		return nil, fmt.Errorf("update status.encryption of storage state %s: %w", state.Name, err)
	}
	return updated, nil
}

// createMigration creates a re-encryption of r under configHash and the
// KMS v2 keys kmsKeys.
func (c *Controller) createMigration(ctx context.Context, r resources.Resource, state *migrationv1alpha1.StorageState,
	configHash string, kmsKeys []migrationv1alpha1.KMSKey) error {
	gr := r.GroupResource()
	annotations := map[string]string{rotation.ConfigHashAnnotation: configHash}
	if len(kmsKeys) > 0 {
		annotations[rotation.KMSKeysAnnotation] = rotation.FormatKMSKeys(kmsKeys)
	}
	m := &migrationv1alpha1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: state.Name + "-reencrypt-",
			Labels:       map[string]string{rotation.CreatedByLabel: rotation.CreatedByValue},
			Annotations:  annotations,
		},
		Spec: migrationv1alpha1.StorageVersionMigrationSpec{
			Resource: migrationv1alpha1.GroupVersionResource{Group: gr.Group, Version: r.Version, Resource: gr.Resource},
		},
	}
	if err := c.Client.Create(ctx, m, client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("create re-encryption: %w", err)
	}
	c.Metrics.ReencryptionCreated(gr)
	c.event(state, m, corev1.EventTypeNormal, ReasonReencryptionCreated, "CreateMigration",
		fmt.Sprintf("Every API server has loaded encryption %s: created migration %s to rewrite every object under it", rotation.Describe(configHash, kmsKeys), m.Name))
	klog.FromContext(ctx).Info("Created re-encryption", "migration", klog.KObj(m), "resource", gr, "configHash", configHash,
		"kmsKeys", rotation.FormatKMSKeys(kmsKeys))
	return nil
}

// event records an event; notes name configurations, hashes and
// migrations, never object contents or keys.
func (c *Controller) event(regarding, related runtime.Object, eventType, reason, action, note string) {
	if c.Recorder != nil {
		c.Recorder.Eventf(regarding, related, eventType, reason, action, "%s", note)
	}
}
