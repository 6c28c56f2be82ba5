package v1alpha1

import corev1 "k8s.io/api/core/v1"

// HasCondition reports whether m's condition t is True.
func (m *StorageVersionMigration) HasCondition(t MigrationConditionType) bool {
	for _, c := range m.Status.Conditions {
		if c.Type == t && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// IsFinished reports whether m has Succeeded or Failed.
func (m *StorageVersionMigration) IsFinished() bool {
	return m.HasCondition(MigrationSucceeded) || m.HasCondition(MigrationFailed)
}

// Migrated counts the objects in the current form because svm wrote them:
// re-stored or already current.
func (p MigrationProgress) Migrated() int64 { return p.Restored + p.AlreadyCurrent }

// Skipped counts the objects svm did not need to write.
func (p MigrationProgress) Skipped() int64 { return p.WrittenSinceStart + p.Gone }
