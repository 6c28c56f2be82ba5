// Package metrics holds every Prometheus metric of svm. They live in one
// place so that the migration engine (internal/migrator) needs no metrics
// library: it reports what it does to a plain migrator.Observer, which
// *Metrics implements; the controllers call *Metrics for what only they
// know (a migration's final status, the trigger's rounds). `svm controller`
// registers them explicitly on controller-runtime's registry, so they are
// served next to controller-runtime's own metrics on --metrics-bind-address;
// `svm migrate` observes nothing.
//
// The resource label is "<resource>.<group>" ("secrets" for the core group),
// the name of the resource's StorageState: labels name resources, never
// objects, so the number of series stays bounded by the number of resources.
//
// The first three names are those of the reference kube-storage-version-migrator,
// kept so that existing dashboards work; the others follow Prometheus'
// naming conventions.
//
// Migration engine (storage_migrator_core_migrator_*):
//
//   - migrated_objects{resource} (counter): objects migrated: written by
//     svm, and re-stored or already current.
//   - objects_total{resource,outcome} (counter): objects handled, by
//     outcome: "restored" (written and stored anew: the answer's
//     resourceVersion differs from the listed one), "already_current"
//     (written, and the API server kept the stored bytes: same
//     resourceVersion), "written_since_start" (no write needed: written
//     after the migration started), "written_since_change" (no write
//     needed: written after every API server stored the resource in the
//     target version, before the migration started), "gone" (deleted),
//     "failed". Every listed object ends in exactly one.
//   - remaining_objects{resource} (gauge): the API server's estimate of the
//     objects the running migration has not listed yet (remainingItemCount);
//     absent when no migration of the resource runs in this process.
//   - migrations{resource,status} (counter): migrations that finished, by
//     status "succeeded" or "failed". A run that stops to be retried or
//     resumed later has not finished.
//   - migration_duration_seconds{status} (histogram): time from a
//     migration's start to its end (status.startTime to
//     status.completionTime, across restarts), for finished migrations.
//     Not by resource: a histogram is a dozen series, kept for the life of
//     the process; a migration's own times are in its status.
//   - running_migrations{resource} (gauge): 1 while a migration of the
//     resource runs in this process, absent otherwise: the gauges of a
//     running migration go when it ends, so that svm keeps no series per
//     resource it ever migrated but the counters.
//   - listed_objects{resource} (gauge): objects the running migration has
//     listed so far, counting the runs it resumed; absent once it ends.
//     With remaining_objects it gives the progress of a migration.
//   - skipped_objects_total{resource,reason} (counter): objects that needed no
//     write, by reason: "newer_than_checkpoint" (written or deleted since the
//     migration started, as its list or its watch showed; no request sent),
//     "newer_than_storage_change" (written since the StorageState's
//     currentStorageVersionRevision; no request sent), "conflict" (written
//     since svm listed it), "not_found" and "gone" (deleted).
//   - failed_objects_total{resource,reason} (counter): objects that could
//     not be rewritten, by error reason (see below).
//   - admission_refusals_total{resource,kind,name,then} (counter): writes an
//     admission webhook (kind "Webhook") or ValidatingAdmissionPolicy
//     named name refused, and what followed: "written_through_status"
//     (the object was written through its status subresource instead,
//     --through-status) or "failed". Names are the cluster's webhooks and
//     policies, so the series stay few.
//   - retries_total{resource,reason} (counter): requests that failed with a
//     transient error and were retried, by error reason.
//   - requests_total{resource,verb} (counter): requests sent, verb "list" or
//     "patch" (or "get": an object read again to move its managedFields off
//     a retired version), retries included: the load svm puts on the API
//     server.
//     rate(...{verb="patch"}) is svm's write rate; a gauge of objects per
//     second is deliberately not kept, since rate() over a counter is exact
//     over any window and survives missed scrapes.
//   - rate_limiter_wait_seconds (histogram): time each request waited for
//     the --qps limiter, shared by all migrations of the process.
//
// Migration controller:
//
//   - storage_migrator_executor{executor} (gauge): 1 for who executes svm's
//     migrations, "svm" (its own engine) or "in-tree"
//     (kube-controller-manager), once svm controller has chosen; absent
//     before.
//
// Triggering controller (storage_migrator_trigger_*):
//
//   - discovery_polls_total (counter): discovery rounds.
//   - discovery_errors_total{scope} (counter): scope "round" counts rounds
//     whose discovery failed (nothing is concluded), scope "group" counts
//     group versions that failed in a round that otherwise answered (their
//     resources keep their state).
//   - storage_state_transitions_total{transition} (counter): changes of
//     StorageStates (of all resources: which resource changed is in the
//     StorageState's Events and status), by transition: "created", "storage_version_changed",
//     "migrated" (the persisted hashes became the current hash alone),
//     "reset" (stale at start-up, reset to Unknown), "stored_versions_pruned"
//     (the CRD's status.storedVersions cut to the storage version),
//     "prune_held" (managedFields entries left naming a version hold the
//     prune; StorageState status.pruneHeld says why).
//   - prune_held_entries{resource} (gauge): managedFields entries naming a
//     version to be pruned that hold the prune of the resource's CRD's
//     storedVersions, at svm's last look; 0 when none.
//
// Re-encryption (storage_migrator_encryption_*), kept by svm controller
// for the resources of --encrypted-resources:
//
//   - config_agreed (gauge): 1 when every API server was read at svm's
//     last look and all have loaded the same encryption configuration; 0
//     while they differ or one could not be read: re-encryptions wait.
//   - apiserver_config_info{apiserver_id_hash,hash,reached} (gauge): 1 per
//     API server, with the configuration hash it reported ("" for none)
//     and whether it was read ("true"/"false"). The labels match
//     kube-apiserver's apiserver_encryption_config_controller_last_config_info.
//   - resource_rewritten{resource} (gauge): 1 when every object of the
//     resource has been rewritten under the configuration all API servers
//     have loaded, so keys the configuration only reads with are no longer
//     needed for it; 0 until then.
//   - reencryptions_total{resource} (counter): re-encryption migrations
//     svm created.
//
// History of finished migrations (storage_migrator_history_*):
//
//   - deleted_migrations_total{resource,status} (counter): finished
//     migrations svm controller deleted beyond those its history limits
//     keep (--succeeded-migrations-kept, --failed-migrations-kept), by
//     status "succeeded" or "failed".
//
// Events (storage_migrator_events_*):
//
//   - dropped_total{reason} (counter): Events svm made but did not send:
//     "queue_full" (more were waiting than its queue holds), "refused" (the
//     API server refused one, or did not answer after the retries),
//     "invalid".
//
// Error reasons, from the API server's answer or the transport: "conflict",
// "not_found", "gone", "throttled" (429), "timeout", "server_error" (other
// 5xx), "forbidden", "unauthorized", "invalid" (422), "bad_request",
// "method_not_allowed", "canceled", "connection" (reset, refused, EOF),
// "other".
package metrics
