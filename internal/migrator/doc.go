// Package migrator is svm's migration engine: given a resource, it rewrites
// every stored object of it so that the API server re-encodes the object in
// the current storage version and under the current encryption key. The
// controller and the CLI are thin shells over it.
//
// # Algorithm
//
// The resource is listed in chunks (500 objects by default) with continue
// tokens, asking only for object metadata (PartialObjectMetadata): svm needs
// nothing else, and it never receives an object's content. Metadata can
// still be large (256 KiB of annotations per object), so a list's answer
// is read as a stream, one object at a time, keeping four fields of each
// and the apiVersions its managedFields entries name (see listChunk); each list asks for as many objects as fit
// Options.ChunkBytes at the size of the last chunk's, and one whose objects
// reach it first is cut and asked again for fewer (see chunkSizer). What
// a list brings and what svm holds are bounded whatever the objects' size
// and order, and a write's answer is read only to its resourceVersion
// (and, for an object that had managedFields entries, on to the first of
// them: no write may clear them, see entries.go).
//
// Every listed object is rewritten with a JSON merge patch that carries
// only metadata.uid and metadata.resourceVersion. The patch cannot change
// content (it sets both fields to the values they already have), and the
// API server applies it to the object it has stored: a field the server
// that answered the list did not know (its CRD schema lagging behind
// another server's) is kept, where an Update of the object as listed
// would drop it (docs/design.md measures both). The resourceVersion acts
// as a precondition: the API server compares it with
// the stored one before anything else, so an object written by someone else
// since it was listed, or deleted and re-created under the same name, is
// answered with 409 Conflict instead of being overwritten. Such an object has
// already been re-encoded by that other write, so it is counted as skipped
// and never retried. NotFound is skipped the same way. The API server skips
// writes whose encoded bytes equal the stored bytes, so only objects whose
// storage version or encryption key changed cost an etcd write.
//
// The first list's resourceVersion is the migration's checkpoint: an object
// whose resourceVersion is newer was written after the migration started and
// needs no rewrite. That makes restarts cheap: when a continue token has
// expired (410 Gone), the list restarts from the API server's inconsistent
// continue token or, failing that, from the beginning, and objects svm has
// already rewritten are skipped without a write.
//
// A chunked list is one snapshot, though: objects written by others after
// the checkpoint are still listed with older resourceVersions. A watch from
// the checkpoint (see changes) finds them, and they are skipped without a
// write as well.
//
// # managedFields
//
// A migration given Request.ManagedFields also moves the managedFields
// entries that name a retired version to the version kept, in the same
// write: a JSON merge patch then carries the object's new managedFields
// list beside its uid and resourceVersion
// (see internal/managedfields for how entries move). Another client's
// write re-encodes an object but leaves its entries as they were, so such
// an object is never skipped as written since the start: a conflict is
// answered by reading it again and moving what it holds then. An entry
// whose fields cannot be placed in the version kept stays as it is and is
// counted (Progress.ManagedFieldsLeft); an object none of whose entries
// move is written as any other, or, with ManagedFields.Only, not at all.
// The reads and dry runs by which the API server converts an entry's
// fields go through the same limiter and retries as the writes.
//
// While a chunk is written, the next one is already being listed, so the
// writes never wait for a list; chunks are still handled one at a time, and
// a chunk's state is saved only once all its objects are.
//
// # Errors
//
// Every error is classified (see Classify): transient errors (429, 5xx,
// timeouts, broken connections) are retried with exponential backoff and
// jitter, a bounded number of times; conflicts and NotFound are skips; errors
// about one object (an admission webhook's denial, 422) are recorded with the
// object's name and the migration continues, failing at the end; errors that
// no retry can fix (the resource does not exist, 403 Forbidden, 405) stop the
// migration at once with a TerminalError that says why. A 404 that names no
// object may be the whole resource's (its CRD deleted, its APIService
// removed): a list tells, and a resource gone mid-run stops the migration
// with ResourceNotFound rather than count the objects left as gone.
//
// Every request has a deadline (Options.RequestTimeout), so an answer that
// stalls halfway is a timeout to retry, not a worker lost for good. A wait
// the server asks for with Retry-After is honoured by every retry, whether
// client-go's or the engine's. Transient trouble that outlives the retries
// is an outage, not a fault of the object at hand: the migration stops with
// that error and the state of its last completed chunk, to be resumed later
// (the controller does so after a backoff), and no object is recorded as
// failed for it.
//
// # Observation
//
// The engine tells an Observer (Options.Observer) what it does: objects
// rewritten, skipped and failed, requests, retries and their errors, waits
// for the rate limiter. Metrics and health checks are built on it elsewhere
// (internal/metrics, internal/health), so the engine depends on no metrics
// library and `svm migrate` observes nothing.
package migrator
