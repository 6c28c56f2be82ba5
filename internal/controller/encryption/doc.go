// Package encryption is the re-encryption controller: it watches what
// every API server reports about its encryption-at-rest configuration and,
// once they all have loaded the same new one, creates migrations that
// rewrite every object of the resources the operator listed, so that they
// are encrypted under the new configuration's key. A KMS v2 key rotation
// changes no configuration: once every API server writes under a KMS v2
// provider's new key, it re-encrypts the same way. It records, on each
// resource's StorageState, the configuration and KMS v2 keys its last
// completed re-encryption was made under: the proof that the old keys are
// no longer needed for it. The decisions are package rotation's; this package reads
// the cluster and carries them out. The migration controller executes.
//
// It is a round controller (package round): each Reconcile looks at the
// API servers and decides for every resource at once. Rounds come every
// Interval, the rate at which API servers reread their configuration file;
// sooner when one of its re-encryptions ends, so that the end is recorded
// at once; and when a retry falls due.
package encryption
