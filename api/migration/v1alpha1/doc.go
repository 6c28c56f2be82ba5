// Package v1alpha1 holds svm's API, migration.k8s.io/v1alpha1.
//
// The group, version, kinds and field names are those of the reference
// kube-storage-version-migrator, so StorageVersionMigration and StorageState
// objects written for it (and scripts that read them) keep working. svm adds
// status fields the reference lacks: progress counters, start and completion
// times, the resourceVersion checkpoint a migration started from, the storage
// version hash it migrated to, and the objects it could not rewrite.
//
// +kubebuilder:object:generate=true
// +groupName=migration.k8s.io
package v1alpha1
