// Package migrate rewrites the stored objects of a Kubernetes resource in
// its current storage version, and prunes a CustomResourceDefinition's
// status.storedVersions once that is done, from any Go program.
//
// It exists for operators that ship CRDs: when a release changes the
// storage version of one of them, the objects stored earlier stay in the
// old version until something rewrites them, and the old version cannot be
// removed from the CRD until status.storedVersions no longer lists it.
// This package is that something, svm's migration engine behind a small
// API, so that an operator need not write its own "re-store every object,
// then prune" loop:
//
//   - Resource migrates one resource;
//   - CRD migrates a CRD's resource and then prunes its storedVersions,
//     moving the managedFields entries that name the versions it prunes;
//   - Retire makes one version removable: nothing stored in it, no
//     managedFields entry naming it, and, with RetireOptions.Unserve, no
//     longer served once no API server saw a request for it for a while;
//   - StartupMigrator does CRD for a few CRDs when a controller-runtime
//     manager starts (mgr.Add), on the leader only.
//
// The exported names of this package keep their meaning from one release
// of svm to the next; the engine behind them may change.
//
// # What is promised
//
// No content changes. The resource is listed in chunks (Options.ChunkSize),
// and every listed object is written back with a JSON merge patch that sets
// nothing but its uid and resourceVersion to the values listed, so it
// cannot change content, not even a field the listing server did not know;
// the API server re-encodes the object in the current storage version (and
// under the current encryption key) and stores it. The listed
// resourceVersion is a precondition: an object written since it was listed
// is refused with a conflict instead of being overwritten, and the uid
// keeps the write off one deleted and created again under the same name.
//
// Conflicts and deletions are skipped, not failures. An object refused
// with a conflict was stored by that other write, in the current form:
// it is counted as WrittenSinceStart and not written again. One deleted
// since it was listed is counted as Gone. Every listed object ends under
// exactly one of Restored, AlreadyCurrent, WrittenSinceStart, Gone and
// Failed (see Counts).
//
// An object fails when its write is refused for a reason about that
// object: an admission webhook or policy denies it, the API server finds
// it invalid, or a webhook it needs cannot be called even after retries.
// It is counted and named with the API server's reason in
// Result.FailedObjects (the first 100; never its contents), and the
// migration goes on with the others; the call then returns an
// *ObjectsFailedError, and CRD does not prune.
//
// Errors. Throttling, server errors, timeouts and broken connections are
// retried with backoff inside the engine, every request under its own
// deadline. What outlives those retries is returned as a transient error
// (IsTransient): call again later. Errors no retry can fix stop the
// migration at once with a *TerminalError whose Reason says why (the
// resource is not served, RBAC forbids a request, ...). Test for them
// with errors.As. A cancelled context stops the migration and is returned.
//
// Pruning. CRD prunes only after a migration in which every object was
// rewritten (or needed no write), and only if the CRD's generation,
// storage version and UID are still those it read before the migration
// started; the status update carries the resourceVersion read, so a CRD
// changed in between is read and judged again, and storedVersions are
// never pruned across a change of storage version (ErrCRDChanged). It
// also checks, through discovery, that the API server it talks to stores
// the CRD's storage version before it writes anything, and lists nothing
// before Options.CRDDrainMargin has passed since the CRD last changed: a
// write accepted under the previous storage version may land that long
// after the change, after the list, and would be left behind.
//
// managedFields. Every entry of an object's metadata.managedFields names
// the apiVersion its manager wrote with, and rewriting the object keeps
// it. Once that version is no longer served, the API server cannot
// convert the object to it, and every server-side apply on the object
// fails ("request to convert CR to an invalid group/version"). So CRD and
// Retire move the entries naming a version they make removable to the
// version they write through, in the same write, keeping each manager,
// operation and field; two Update entries of one manager become one. A
// field is kept wherever the version kept has it: for a CRD with a
// conversion webhook the API server converts the entry's fields (in
// dry-run updates, which store nothing); otherwise a field keeps its path
// if the kept version's schema has it. An entry whose fields cannot be
// placed is left as it is and reported (Counts.ManagedFieldsLeft,
// Result.LeftEntries), never emptied: no manager loses a field that
// exists; and while any is left, storedVersions are not pruned
// (ErrManagedFieldsLeft), since that would let the version it names be
// removed. A field that neither the version kept nor the object has owns
// nothing and is dropped from its entry. A conflict does not skip such an object,
// since the other client's write did not move its entries: it is read
// again and its entries as they are then moved.
//
// Idempotence, and resuming. The package keeps no state, in the cluster
// or elsewhere. A call made again, after an error or a restart, lists and
// writes the resource again from the start; objects stored in the current
// form already cost one request each and no write to etcd, since the API
// server stores nothing when the bytes would not change. CRD on a CRD whose
// storedVersions list the storage version alone costs one read and writes
// nothing.
//
// Load. Options.Workers writes are in flight at most; adaptive pacing keeps
// as many as take the API server to the knee of its latency curve, and
// fewer when it throttles or its rate collapses;
// Options.QPS caps the requests per second. The engine reads metadata
// only, and its memory depends on the chunk size, not on the number or
// size of the objects.
//
// # What is not promised
//
//   - That every API server of a highly available control plane has taken
//     up a CRD's new storage version. CRD checks the one it talks to;
//     another that has not yet seen the change writes the old version, and
//     objects it writes during the migration are taken as current. After
//     changing a CRD's storage version, give the API servers time to see
//     it (svm's controller waits 15 seconds) before calling CRD.
//   - Anything about conversion: writing through a version is converting
//     to the storage version. A lossy conversion webhook loses on this
//     write what it loses on any other.
//   - Coordination with other migrators (svm's controller, the in-tree
//     storage version migrator of kube-controller-manager). Running beside
//     them is safe, since every write is guarded by its preconditions, but
//     the work is done twice.
//   - Pruning for built-in resources, which have no storedVersions.
//   - That no client writes through a version again after CRD pruned it:
//     its writes add entries naming it. Retire's Unserve waits for a
//     quiet window before it stops serving a version, and says which API
//     servers still saw requests for it.
//   - Progress that survives the process: a call cut short starts over
//     (cheaply, as said above) when made again.
//
// # RBAC
//
// For a CRD's resource (Resource needs only the first line):
//
//   - list and update on the resource (and patch, to move managedFields
//     off a retired version); watch too, which lets the engine
//     skip objects others write during the migration without a request
//     (without it they cost a write answered with a conflict);
//   - get on customresourcedefinitions and update on
//     customresourcedefinitions/status (apiextensions.k8s.io), which may
//     be limited to the CRDs' names;
//   - get on the resource, for a CRD with a conversion webhook whose
//     objects' managedFields name a version given up (see above).
//
// Retire needs the same, update on customresourcedefinitions for Unserve,
// and get on the non-resource URL /metrics of every API server for the
// requests each saw (without it their usage is unknown, and Unserve
// refuses). It reads svm's StorageStates where they exist (get on
// storagestates.migration.k8s.io) to tell what a built-in resource may
// be stored in, and identity leases in kube-system (list on leases) to
// find the API servers unless RetireOptions.APIServers names them.
//
// Discovery is read too, which every authenticated user may by default.
// As kubebuilder markers, for widgets.example.com:
//
//	// +kubebuilder:rbac:groups=example.com,resources=widgets,verbs=list;watch;patch
//	// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get,resourceNames=widgets.example.com
//	// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions/status,verbs=update,resourceNames=widgets.example.com
package migrate
