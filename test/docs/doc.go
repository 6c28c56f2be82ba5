// Package docs keeps the kubectl commands in svm's documentation pointed at
// svm's API.
//
// Since Kubernetes v1.37 kube-apiserver serves an in-tree
// storagemigration.k8s.io/v1 StorageVersionMigration by default, and kubectl
// resolves a plain `storageversionmigrations` to it rather than to svm's
// migration.k8s.io/v1alpha1 CRD. A documented `kubectl wait
// --for=condition=Succeeded storageversionmigrations --all` then waits on the
// wrong objects, and `kubectl get storageversionmigrations` shows the wrong
// list, without any error to tell the reader. So every kubectl command in
// README.md and docs/*.md must name svm's resources with their group
// (storageversionmigrations.migration.k8s.io, storagestates.migration.k8s.io)
// or by svm's own short names and category, which the in-tree API lacks.
//
// The package finds the kubectl commands in Markdown (Commands) and the
// resources they name without a group (Unqualified); its test scans the
// repository's documentation with them, and test/integration/cli runs the
// README's wait command against a real control plane that serves both APIs.
package docs
