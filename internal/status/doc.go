// Package status tells an operator where storage version migration stands:
// what every migration is doing and how fast, and which resources are known
// to be stored in their current storage version alone.
//
// An operator asking "is it safe to drop that API version, that encryption
// key?" needs the answer from several objects at once: svm's
// migration.k8s.io/v1alpha1 StorageVersionMigrations and StorageStates, and
// the in-tree storagemigration.k8s.io/v1 StorageVersionMigrations that
// kube-controller-manager runs. Build joins them into one Report, which is
// printed as a table for people or as a versioned JSON or YAML document for
// scripts.
//
// The package is pure: it takes the objects as read and the time they were
// read at, and never talks to an API server or reads the clock, so every
// output is tested against golden files with a fixed clock. `svm status`
// (internal/cli) reads the objects and prints what this package builds.
package status
