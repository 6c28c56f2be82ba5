// Package operation is the one way into svm's engine: what svm does with
// stored objects, and the rules that decide it, each in one place.
//
// svm does a few things with stored objects: it rewrites a resource's
// objects so that each is stored again in the storage version (svm
// migrate, the migration controller's executors, pkg/migrate.Resource); it
// migrates a CRD's resource and then prunes its status.storedVersions
// (pkg/migrate.CRD); it retires a version (svm retire,
// pkg/migrate.Retire), moving managedFields entries off it and, once no
// client uses it, unserving it. Each used to be wired to the engine by its
// caller, and the rules around the engine (which version is stored, which
// entries move where, when a prune may go ahead) were written again by
// each, and came to disagree. Here they are written once:
//
//   - an Operations is built once per process, over its kubeclients.Set
//     and with the engine tuned as the operator asked (New);
//   - Run runs the engine, resumable, for the callers that keep its state
//     (the migration controller) or show it as it goes (svm migrate);
//   - Resource, CRD and Retire are the whole operations, with their
//     waits, checks and prune loops;
//   - FieldsToMove is the one choice of which managedFields entries a
//     migration moves, and where to (crdversions.MoveOff's versions,
//     managedfields' rule).
//
// What a CRD says of its versions is internal/crdversions'; the counters
// and their words are the engine's Counts. The layer uses both as they
// are, and so do its callers: one type from the engine's counters to
// svm's output and pkg/migrate's results.
package operation
