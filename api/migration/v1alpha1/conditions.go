package v1alpha1

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

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

// Total is the number of entries left, whatever the reason; 0 for nil.
func (l *ManagedFieldsLeft) Total() int64 {
	if l == nil {
		return 0
	}
	return l.NotInVersion + l.NotServed + l.NotConverted + l.Refused + l.Unplaced + l.Denied
}

// String says how many were left for each reason that left any, as
// "NotConverted 2, Denied 1", the words of the engine's reasons.
func (l *ManagedFieldsLeft) String() string {
	if l == nil {
		return ""
	}
	var parts []string
	for _, r := range []struct {
		reason string
		n      int64
	}{
		{"NotInVersion", l.NotInVersion}, {"NotServed", l.NotServed}, {"NotConverted", l.NotConverted},
		{"Refused", l.Refused}, {"Unplaced", l.Unplaced}, {"Denied", l.Denied},
	} {
		if r.n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", r.reason, r.n))
		}
	}
	return strings.Join(parts, ", ")
}

// Skipped counts the objects svm did not need to write.
func (p MigrationProgress) Skipped() int64 { return p.WrittenSinceStart + p.Gone }
