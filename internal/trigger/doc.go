// Package trigger decides when a resource needs a storage version
// migration, following the life-cycle of a StorageState (the automated
// migration design): discovery's storageVersionHash is observed
// periodically; a missing StorageState or a changed hash starts a migration
// and records the hash in status.persistedStorageVersionHashes; a migration
// that succeeds for the current hash refines that list to the current hash
// alone; a StorageState whose heartbeat is older than the staleness window
// when svm starts is reset to ["Unknown"], since changes may have been
// missed.
//
// The decisions are pure functions of their inputs (the clock is an input),
// so every rule is table-tested and fuzzed. The controller that feeds them
// only reads, calls Decide, and writes what it returns.
//
// Where the reference migrator hurts users, svm differs: it deletes only
// migrations it created itself (labelled), never a user's; a failed
// migration stays visible and a new one is created after a growing delay; a
// discovery round that did not answer for a resource changes nothing; and a
// migration refines the persisted hashes only if it was made for the
// current hash (recorded in an annotation), so a migration started before a
// storage flip can never claim the new version.
package trigger
