package storagestate

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/fingerprint"
	"github.com/svm-project/svm/internal/metrics"
)

// Reasons of the triggering controller's events.
const (
	ReasonCreated               = "Created"
	ReasonReset                 = "Reset"
	ReasonStorageVersionChanged = "StorageVersionChanged"
	// ReasonStorageChanged: the storage changed under the same storage
	// version hash (a CRD's storage version went away and came back, its
	// spec changed, a storedVersions entry was added, it was re-created).
	ReasonStorageChanged       = "StorageChanged"
	ReasonMigrated             = "Migrated"
	ReasonStoredVersionsPruned = "StoredVersionsPruned"
	ReasonMigrationCreated     = "MigrationCreated"
	ReasonRetryScheduled       = "RetryScheduled"
	ReasonSuperseded           = "Superseded"
	// ReasonPruneHeld: every object was rewritten, but managedFields
	// entries still name a version to be pruned (status.pruneHeld).
	ReasonPruneHeld = "PruneHeld"
)

// transition is a change of a StorageState worth an event and a metric.
// Notes name hashes, versions and migrations, never object contents.
type transition struct {
	reason, action, note string
	// metric is the transition label of storage_state_transitions_total.
	metric string
	// warning: something keeps svm from finishing, for the user to act on.
	warning bool
}

// statusTransitions says what a status update changes: the storage version
// hash, and whether the persisted hashes became the current one alone.
func statusTransitions(old, updated *migrationv1alpha1.StorageStateStatus) []transition {
	var out []transition
	if old.CurrentStorageVersionHash != "" && updated.CurrentStorageVersionHash != old.CurrentStorageVersionHash &&
		updated.CurrentStorageVersionHash == migrationv1alpha1.UnknownStorageVersionHash {
		out = append(out, transition{
			reason: ReasonStorageVersionChanged, action: "Update", metric: metrics.TransitionStorageVersionChanged,
			note: fmt.Sprintf("API servers disagree on the storage version (StorageVersion API; was hash %s): persisted hashes now %s; migrations wait until they agree", old.CurrentStorageVersionHash, list(updated.PersistedStorageVersionHashes)),
		})
	} else if old.CurrentStorageVersionHash != "" && updated.CurrentStorageVersionHash != old.CurrentStorageVersionHash {
		out = append(out, transition{
			reason: ReasonStorageVersionChanged, action: "Update", metric: metrics.TransitionStorageVersionChanged,
			note: fmt.Sprintf("Storage version hash changed from %s to %s; persisted hashes now %s", old.CurrentStorageVersionHash, updated.CurrentStorageVersionHash, list(updated.PersistedStorageVersionHashes)),
		})
	}
	if t, ok := storageChangedTransition(old, updated); ok {
		out = append(out, t)
	}
	if h := updated.PruneHeld; h != nil && (old.PruneHeld == nil || old.PruneHeld.Migration != h.Migration) {
		out = append(out, transition{
			reason: ReasonPruneHeld, action: "HoldPrune", metric: metrics.TransitionPruneHeld, warning: true,
			note: fmt.Sprintf("status.storedVersions not pruned after migration %s: %s", h.Migration, h.Message),
		})
	}
	current := updated.CurrentStorageVersionHash
	if isOnly(updated.PersistedStorageVersionHashes, current) && !isOnly(old.PersistedStorageVersionHashes, current) {
		out = append(out, transition{
			reason: ReasonMigrated, action: "Update", metric: metrics.TransitionMigrated,
			note: fmt.Sprintf("Every object is stored at hash %s: persisted hashes set to %s (were %s)", current, list(updated.PersistedStorageVersionHashes), list(old.PersistedStorageVersionHashes)),
		})
	}
	return out
}

// storageChangedTransition is the transition of a status whose storage
// changed under the same hash (trigger's storageMoved): what was recorded
// of it is dropped, and svm waits again before migrating. A fingerprint
// recorded for the first time is no such change.
func storageChangedTransition(old, updated *migrationv1alpha1.StorageStateStatus) (transition, bool) {
	if old.StorageFingerprint == "" || old.CurrentStorageVersionHash != updated.CurrentStorageVersionHash ||
		fingerprint.SameStorage(old.StorageFingerprint, updated.StorageFingerprint) {
		return transition{}, false
	}
	return transition{
		reason: ReasonStorageChanged, action: "Update",
		note: fmt.Sprintf("Storage changed under storage version hash %s (was %s, now %s): objects written meanwhile may be in another version, so no object is skipped as written since the change until svm's next migration records when; persisted hashes now %s",
			updated.CurrentStorageVersionHash, old.StorageFingerprint, updated.StorageFingerprint, list(updated.PersistedStorageVersionHashes)),
	}, true
}

func createdTransition(status *migrationv1alpha1.StorageStateStatus) transition {
	return transition{
		reason: ReasonCreated, action: "Create", metric: metrics.TransitionCreated,
		note: fmt.Sprintf("Tracking storage version hash %s; persisted hashes %s until a migration succeeds", status.CurrentStorageVersionHash, list(status.PersistedStorageVersionHashes)),
	}
}

func resetTransition(lastHeartbeat time.Time, staleAfter time.Duration) transition {
	return transition{
		reason: ReasonReset, action: "Reset", metric: metrics.TransitionReset,
		note: fmt.Sprintf("Heartbeat older than %s (last %s): storage changes may have been missed, persisted hashes reset to [%s]", staleAfter, lastHeartbeat.UTC().Format(time.RFC3339), migrationv1alpha1.UnknownStorageVersionHash),
	}
}

func prunedTransition(crd string, from, to []string) transition {
	return transition{
		reason: ReasonStoredVersionsPruned, action: "PruneStoredVersions", metric: metrics.TransitionStoredVersionsPruned,
		note: fmt.Sprintf("Pruned status.storedVersions of CustomResourceDefinition %s from %s to %s", crd, list(from), list(to)),
	}
}

// retryKey identifies one scheduled retry, so that rounds that find the
// same one waiting do not repeat its event.
func retryKey(hash string, due time.Time) string {
	return hash + "@" + due.UTC().Format(time.RFC3339Nano)
}

func list(items []string) string { return "[" + strings.Join(items, " ") + "]" }

func isOnly(hs []string, h string) bool { return h != "" && slices.Equal(hs, []string{h}) }

// record emits t's event on regarding (related may be nil) and counts it.
func (c *Controller) record(gr schema.GroupResource, regarding, related runtime.Object, t transition) {
	if t.metric != "" {
		c.Metrics.StorageStateTransition(gr, t.metric)
	}
	eventType := corev1.EventTypeNormal
	if t.warning {
		eventType = corev1.EventTypeWarning
	}
	c.event(regarding, related, eventType, t.reason, t.action, t.note)
}

func (c *Controller) event(regarding, related runtime.Object, eventType, reason, action, note string) {
	if c.Recorder != nil {
		c.Recorder.Eventf(regarding, related, eventType, reason, action, "%s", note)
	}
}
