package trigger

import (
	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
)

// InitializerValue is CreatedByLabel's value on the one-time migrations of
// resources whose discovery reports no storageVersionHash (some aggregated
// APIs). Without a hash svm cannot see their storage version change, so it
// migrates each of them once, when it first sees it, and never deletes
// those migrations.
const InitializerValue = "svm-initializer"

// InitialMigrationName is the name of the one-time migration of a resource
// without a storageVersionHash. The name is fixed so that the migration is
// made once: a later round, or another replica, finds it and does nothing.
// Deleting it asks for another.
func InitialMigrationName(r migrationv1alpha1.GroupResource) string {
	return migrationv1alpha1.StorageStateName(r) + "-initial"
}
