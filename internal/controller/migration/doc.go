// Package migration is the migrator controller: it executes
// StorageVersionMigration objects with the migration engine
// (internal/migrator).
//
// Reconcile only decides: from the cached migrations it chooses which ones
// run now (Schedule, a pure function), starts those in their own goroutines
// and stops those that were deleted or finished. Each running migration
// saves its continue token (in spec.continueToken, where the reference
// migrator keeps it) and its progress and checkpoint (in status) after every
// chunk, so a controller that crashes or is preempted resumes where it left
// off. Migrations marked Running resume before new ones start; one
// migration per resource runs at a time, and a configurable number of
// resources in parallel. Each run reads its resource's storage fingerprint
// (the guard) before it rewrites anything and again at the end; Judge,
// pure as well, decides from the two whether the run goes on, waits for
// API servers to agree, or starts over.
package migration
