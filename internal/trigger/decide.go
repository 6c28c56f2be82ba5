package trigger

import (
	"slices"
	"strconv"
	"time"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
)

const (
	// CreatedByLabel marks the migrations svm's trigger created; only those
	// are ever deleted by svm.
	CreatedByLabel = "migration.k8s.io/created-by"
	// CreatedByValue is CreatedByLabel's value on svm's migrations.
	CreatedByValue = "svm-trigger"
	// TargetHashAnnotation records the storage version hash a trigger
	// migration was created for.
	TargetHashAnnotation = "migration.k8s.io/storage-version-hash"
	// CRDGenerationAnnotation records the generation of the CRD a trigger
	// migration of a custom resource was created at.
	CRDGenerationAnnotation = "migration.k8s.io/crd-generation"
	// ReasonAnnotation says why the trigger made a migration: ReasonChanged
	// or ReasonFirstSight. The controller starts changes first.
	ReasonAnnotation = "migration.k8s.io/reason"
	// ReasonChanged: objects are known to be stored in a version other
	// than the current one (a storage version change svm saw, or a CRD's
	// storedVersions).
	ReasonChanged = "StorageVersionChanged"
	// ReasonFirstSight: svm does not know what is stored (it sees the
	// resource for the first time, or lost track), so it rewrites
	// everything once; nothing says a version is left behind.
	ReasonFirstSight = "FirstSight"
)

// Input is what Decide knows about one resource.
type Input struct {
	Now time.Time
	// Observed is discovery's storageVersionHash for the resource this
	// round, or nil when discovery did not answer for it (a partial
	// failure): then no hash change is inferred.
	Observed *string
	// State is the resource's StorageState, or nil when there is none.
	State *migrationv1alpha1.StorageState
	// Migrations are all migrations of the resource, svm's and users'.
	Migrations []migrationv1alpha1.StorageVersionMigration
	// RetryBase and RetryMax bound the delay before a failed migration is
	// followed by a new one: RetryBase doubling per failure, at most RetryMax.
	RetryBase, RetryMax time.Duration
	// CRD, for custom resources, is what the CRD says it has stored.
	CRD *CRDStorage
	// Encoding, where the StorageVersion API reports on the resource, is
	// what the API servers encode it in. It takes precedence over
	// Observed: discovery is one API server's view.
	Encoding *Encoding
	// SettleDelay applies to custom resources: a migration starts only
	// once the current storage version hash has been seen for this long,
	// so that every API server has seen the CRD change. There is no
	// StorageVersion object for a CRD's resource to say when they have.
	SettleDelay time.Duration
}

// Encoding is what the StorageVersion API says about one resource.
type Encoding struct {
	// Common is the hash of the version every API server encodes the
	// resource in (status.commonEncodingVersion), "" while they disagree.
	Common string
	// Reported are the hashes of every version any API server reports
	// encoding the resource in.
	Reported []string
}

// CRDStorage is what a CustomResourceDefinition records about storage. The
// API server persists status.storedVersions, so it tells what may be stored
// even about changes svm did not see.
type CRDStorage struct {
	Generation int64
	// StoredHashes are the hashes of status.storedVersions other than the
	// storage version: versions objects may still be stored in.
	StoredHashes []string
}

// Decision is what to do for one resource. Apply it in order: delete, then
// write the state, then create the migration.
type Decision struct {
	// DeleteMigrations names svm's unfinished migrations to stop.
	DeleteMigrations []string
	// CreateState is set when the StorageState must be created (or
	// re-created) with Status.
	CreateState bool
	// Status, when set, is the StorageState's new status.
	Status *migrationv1alpha1.StorageStateStatus
	// CreateMigrationFor, when set, asks for a new migration to this hash.
	CreateMigrationFor *string
	// Reason, with CreateMigrationFor, is ReasonChanged or
	// ReasonFirstSight.
	Reason string
	// RequeueAfter, when not zero, is when a retry falls due.
	RequeueAfter time.Duration
	// PruneStoredVersions: a migration made at the CRD's current generation
	// succeeded, so its status.storedVersions can be cut to the storage
	// version.
	PruneStoredVersions bool
}

// Decide applies the StorageState life-cycle to one resource.
func Decide(in Input) Decision {
	d := decide(in)
	if d.CreateMigrationFor != nil {
		d.Reason = reason(in, d)
	}
	return d
}

// reason tells a storage change from first sight: a change when a known
// hash other than the target is recorded as persisted, or the CRD lists
// another stored version.
func reason(in Input, d Decision) string {
	var persisted []string
	switch {
	case d.Status != nil:
		persisted = d.Status.PersistedStorageVersionHashes
	case in.State != nil:
		persisted = in.State.Status.PersistedStorageVersionHashes
	}
	if in.CRD != nil {
		persisted = append(slices.Clone(persisted), in.CRD.StoredHashes...)
	}
	for _, h := range persisted {
		if h != migrationv1alpha1.UnknownStorageVersionHash && h != *d.CreateMigrationFor {
			return ReasonChanged
		}
	}
	return ReasonFirstSight
}

func decide(in Input) Decision {
	if in.Encoding != nil {
		if in.Encoding.Common == "" {
			return disagree(in)
		}
		common := in.Encoding.Common
		in.Observed = &common
	}
	if in.State == nil {
		if in.Observed == nil {
			return Decision{}
		}
		hash := *in.Observed
		d := Decision{
			DeleteMigrations: unfinishedOwned(in.Migrations, ""),
			CreateState:      true,
			Status: &migrationv1alpha1.StorageStateStatus{
				PersistedStorageVersionHashes: []string{migrationv1alpha1.UnknownStorageVersionHash},
				CurrentStorageVersionHash:     hash, CurrentStorageVersionSince: ptrTime(in.Now), LastHeartbeatTime: metaTime(in.Now),
			},
		}
		if wait := in.settling(in.Now); wait > 0 {
			d.RequeueAfter = wait
			return d
		}
		d.CreateMigrationFor = &hash
		return d
	}

	status := in.State.Status.DeepCopy()
	if len(status.PersistedStorageVersionHashes) == 0 {
		// Unknown is the default: a state whose status was never written
		// (svm stopped between creating it and writing its status) proves
		// nothing about what is stored.
		status.PersistedStorageVersionHashes = []string{migrationv1alpha1.UnknownStorageVersionHash}
	}
	var d Decision
	crdBehind := in.CRD != nil && len(in.CRD.StoredHashes) > 0
	if crdBehind {
		for _, h := range in.CRD.StoredHashes {
			if !slices.Contains(status.PersistedStorageVersionHashes, h) {
				status.PersistedStorageVersionHashes = append(status.PersistedStorageVersionHashes, h)
				d.Status = status
			}
		}
	}
	if in.Observed != nil {
		status.LastHeartbeatTime = metaTime(in.Now)
		d.Status = status
		if hash := *in.Observed; hash != status.CurrentStorageVersionHash {
			// The storage version changed: objects may now be in either
			// version until a migration to the new one succeeds.
			status.CurrentStorageVersionHash = hash
			status.CurrentStorageVersionSince = ptrTime(in.Now)
			if !slices.Contains(status.PersistedStorageVersionHashes, hash) {
				status.PersistedStorageVersionHashes = append(status.PersistedStorageVersionHashes, hash)
			}
			d.DeleteMigrations = unfinishedOwned(in.Migrations, hash)
			if hasUnfinishedOwned(in.Migrations, hash) {
				return d
			}
			if wait := in.settling(in.Now); wait > 0 {
				d.RequeueAfter = wait
				return d
			}
			d.CreateMigrationFor = &hash
			return d
		}
	}

	current := status.CurrentStorageVersionHash
	if current == "" || current == migrationv1alpha1.UnknownStorageVersionHash || isExactly(status.PersistedStorageVersionHashes, current) {
		return d
	}
	live := in.Migrations[:0:0]
	for _, m := range in.Migrations {
		// Only migrations made since the state was (re)created count, and
		// while the CRD lists other stored versions, only those made at its
		// current generation: the storage version cannot have changed
		// during them.
		if m.CreationTimestamp.Before(&in.State.CreationTimestamp) {
			continue
		}
		if crdBehind && (!IsOwned(&m) || m.Annotations[CRDGenerationAnnotation] != strconv.FormatInt(in.CRD.Generation, 10)) {
			continue
		}
		live = append(live, m)
	}
	if succeededFor(live, current) {
		status.PersistedStorageVersionHashes = []string{current}
		d.Status = status
		d.PruneStoredVersions = crdBehind
		return d
	}
	if hasUnfinished(live) || hasUnfinishedOwned(in.Migrations, current) {
		return d
	}
	// No migration is under way for the current hash: start one, once
	// every API server has had time to see a CRD's change, and after a
	// growing delay if svm's earlier ones failed.
	if since := in.State.Status.CurrentStorageVersionSince; since == nil {
		// Seen before svm recorded when: long settled.
	} else if wait := in.settling(since.Time); wait > 0 {
		d.RequeueAfter = wait
		return d
	}
	failures, last := failedOwned(live, current)
	if failures > 0 {
		due := last.Add(backoff(in.RetryBase, in.RetryMax, failures))
		if in.Now.Before(due) {
			d.RequeueAfter = due.Sub(in.Now)
			return d
		}
	}
	d.CreateMigrationFor = &current
	return d
}

// disagree is the decision while API servers encode the resource in
// different versions, as during a rolling upgrade: objects are being
// written in every reported version, so each may be stored, the current
// version is unknown, and a migration now would leave behind whatever the
// servers still on the old version write. svm's migrations of the resource
// stop; a new one starts when the servers agree (the current hash then
// changes from Unknown).
func disagree(in Input) Decision {
	var d Decision
	status := &migrationv1alpha1.StorageStateStatus{PersistedStorageVersionHashes: []string{migrationv1alpha1.UnknownStorageVersionHash}}
	if in.State == nil {
		d.CreateState = true
	} else {
		status = in.State.Status.DeepCopy()
		if len(status.PersistedStorageVersionHashes) == 0 {
			status.PersistedStorageVersionHashes = []string{migrationv1alpha1.UnknownStorageVersionHash}
		}
	}
	for _, h := range in.Encoding.Reported {
		if !slices.Contains(status.PersistedStorageVersionHashes, h) {
			status.PersistedStorageVersionHashes = append(status.PersistedStorageVersionHashes, h)
		}
	}
	if status.CurrentStorageVersionHash != migrationv1alpha1.UnknownStorageVersionHash {
		status.CurrentStorageVersionHash = migrationv1alpha1.UnknownStorageVersionHash
		status.CurrentStorageVersionSince = ptrTime(in.Now)
	}
	status.LastHeartbeatTime = metaTime(in.Now)
	d.Status = status
	d.DeleteMigrations = unfinishedOwned(in.Migrations, "")
	return d
}

// settling is how long a custom resource's migration must still wait for
// API servers to settle on a storage version first seen at since, 0 for
// none.
func (in Input) settling(since time.Time) time.Duration {
	if in.CRD == nil || in.SettleDelay <= 0 {
		return 0
	}
	return max(metaTime(since).Add(in.SettleDelay).Sub(in.Now), 0)
}

// IsStale reports whether a StorageState's heartbeat is older than window:
// svm may have missed storage changes, so the state must be reset.
func IsStale(s *migrationv1alpha1.StorageState, now time.Time, window time.Duration) bool {
	return now.Sub(s.Status.LastHeartbeatTime.Time) > window
}

// ResetStatus is the status of a StorageState re-created after it went
// stale: any storage version may be stored until a migration proves
// otherwise. What it records about encryption stays: a re-encryption is
// tied to the configuration hash it was made under, which svm compares
// with what the API servers report whenever it looks, not to svm's
// having watched in between.
func ResetStatus(s *migrationv1alpha1.StorageState, now time.Time) *migrationv1alpha1.StorageStateStatus {
	return &migrationv1alpha1.StorageStateStatus{
		PersistedStorageVersionHashes: []string{migrationv1alpha1.UnknownStorageVersionHash},
		CurrentStorageVersionHash:     s.Status.CurrentStorageVersionHash,
		LastHeartbeatTime:             metaTime(now),
		Encryption:                    s.Status.Encryption.DeepCopy(),
	}
}

func backoff(base, maxDelay time.Duration, failures int) time.Duration {
	d := base
	for i := 1; i < failures && d < maxDelay; i++ {
		d *= 2
	}
	return min(d, maxDelay)
}

// IsOwned reports whether svm's trigger created m.
func IsOwned(m *migrationv1alpha1.StorageVersionMigration) bool {
	return m.Labels[CreatedByLabel] == CreatedByValue
}

// TargetHash is the hash an owned migration was created for.
func TargetHash(m *migrationv1alpha1.StorageVersionMigration) string {
	return m.Annotations[TargetHashAnnotation]
}

// unfinishedOwned names svm's unfinished migrations for any hash but keep.
func unfinishedOwned(ms []migrationv1alpha1.StorageVersionMigration, keep string) []string {
	var out []string
	for i := range ms {
		m := &ms[i]
		if IsOwned(m) && !m.IsFinished() && m.DeletionTimestamp == nil && (keep == "" || TargetHash(m) != keep) {
			out = append(out, m.Name)
		}
	}
	slices.Sort(out)
	return out
}

func hasUnfinishedOwned(ms []migrationv1alpha1.StorageVersionMigration, hash string) bool {
	for i := range ms {
		if m := &ms[i]; IsOwned(m) && TargetHash(m) == hash && !m.IsFinished() && m.DeletionTimestamp == nil {
			return true
		}
	}
	return false
}

func hasUnfinished(ms []migrationv1alpha1.StorageVersionMigration) bool {
	for i := range ms {
		if !ms[i].IsFinished() && ms[i].DeletionTimestamp == nil {
			return true
		}
	}
	return false
}

// succeededFor reports whether a migration made for hash succeeded: an
// owned one created for it, or a user's that recorded it as its target.
func succeededFor(ms []migrationv1alpha1.StorageVersionMigration, hash string) bool {
	for i := range ms {
		m := &ms[i]
		if !m.HasCondition(migrationv1alpha1.MigrationSucceeded) || m.Status.StorageVersionHash != hash {
			continue
		}
		if !IsOwned(m) || TargetHash(m) == hash {
			return true
		}
	}
	return false
}

// failedOwned counts svm's failed migrations for hash and returns when the
// last one ended.
func failedOwned(ms []migrationv1alpha1.StorageVersionMigration, hash string) (int, time.Time) {
	n, last := 0, time.Time{}
	for i := range ms {
		m := &ms[i]
		if IsOwned(m) && TargetHash(m) == hash && m.HasCondition(migrationv1alpha1.MigrationFailed) {
			n++
			end := m.CreationTimestamp.Time
			if m.Status.CompletionTime != nil {
				end = m.Status.CompletionTime.Time
			}
			if end.After(last) {
				last = end
			}
		}
	}
	return n, last
}

func isExactly(hashes []string, hash string) bool {
	return len(hashes) == 1 && hashes[0] == hash
}
