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
// For "is it safe to drop that encryption key?", Build also joins what the
// API servers report about their encryption-at-rest configurations (a
// rotation.Agreement, read as svm controller reads it) with what each
// StorageState records of its resource's last re-encryption
// (status.encryption), and says in words what follows for the keys. It
// claims no more than it read: when a server could not be read, or the
// servers could not all be listed, the verdict says so and keeps every
// key. A cluster without encryption at rest, where nothing records a
// re-encryption, gets no such section.
//
// The package is pure: it takes the objects as read and the time they were
// read at, and never talks to an API server or reads the clock, so every
// output is tested against golden files with a fixed clock. `svm status`
// (internal/cli) reads the objects and prints what this package builds.
package status
