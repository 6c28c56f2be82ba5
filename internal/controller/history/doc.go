// Package history keeps the number of finished StorageVersionMigrations
// bounded, as a CronJob's history limits do its Jobs: per resource (group
// and resource), svm controller keeps the newest Succeeded and the newest
// Failed migrations, as many as --succeeded-migrations-kept and
// --failed-migrations-kept say, and deletes older finished ones that svm
// created (labelled followup.CreatedByLabel: the trigger's and the
// re-encryption's, which grow with every storage change). A user's
// migrations count among the newest but are never deleted: a tool that
// applies one would create it again, and it would run again. Unfinished
// migrations are never touched.
//
// Some finished migrations are kept whatever the limits, because a
// decision of svm still reads them (Kept says which and why): the newest
// success per storage version hash (the trigger refines a StorageState
// from it), the newest success that skipped no object written since a
// storage change (the re-encryption records it), the newest clean success
// and the row of failures and held successes after it (the trigger and the
// re-encryption double their retry delay per failure: deleting them would
// retry at once), and the in-tree migrator's last success and last failure
// after it (an in-tree migration is owned by svm's, so it goes with it, and
// a failed one is evidence, package maybestored, that a version may still
// be stored).
//
// The rule is a pure function (Expired); the Controller applies it, one
// resource at a time, from the manager's cache, when a migration of the
// resource finishes (and once for every resource at start), with
// leadership. It deletes with the UID and resourceVersion it decided on as
// preconditions, so a migration changed since is left for the next look.
package history
