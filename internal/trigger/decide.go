package trigger

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/fingerprint"
	"github.com/svm-project/svm/internal/followup"
)

const (
	// CreatedByLabel marks the migrations svm's trigger created; only those
	// are ever deleted by svm.
	CreatedByLabel = followup.CreatedByLabel
	// CreatedByValue is CreatedByLabel's value on svm's migrations.
	CreatedByValue = followup.TriggerValue
	// TargetHashAnnotation records the storage version hash a trigger
	// migration was created for.
	TargetHashAnnotation = followup.StorageVersionHashAnnotation
	// CRDGenerationAnnotation records the generation of the CRD a trigger
	// migration of a custom resource was created at. It vouches for the
	// CRD's storage now only if that generation is in the fingerprint's
	// run of generations with the storage version of now
	// (fingerprint.Covers).
	CRDGenerationAnnotation = "migration.k8s.io/crd-generation"
	// ReasonAnnotation says why the trigger made a migration: ReasonChanged
	// or ReasonFirstSight. The controller starts changes first.
	ReasonAnnotation = followup.ReasonAnnotation
	// ReasonChanged: objects are known to be stored in a version other
	// than the current one (followup.ReasonChanged).
	ReasonChanged = followup.ReasonChanged
	// ReasonFirstSight: svm does not know what is stored
	// (followup.ReasonFirstSight).
	ReasonFirstSight = followup.ReasonFirstSight
)

// Input is what Decide knows about one resource.
type Input struct {
	// Now is the API server's time (kubeclients.ServerClock), never this
	// machine's: it is recorded as when the storage changed and compared
	// with the migrations' creationTimestamps, which the server stamps.
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
	// SkipHeartbeat: what is observed does not renew the state's
	// heartbeat (a round that changes asked for, between the rounds that
	// renew every state's): the state is written only if something else
	// of it changes.
	SkipHeartbeat bool
	// Encoding, where the StorageVersion API reports on the resource or
	// several API servers' discovery was read one by one, is what the API
	// servers encode it in. It takes precedence over Observed: discovery
	// through the kubeconfig's address is one API server's view.
	Encoding *Encoding
	// Fingerprint is what decides the resource's storage version now
	// (internal/fingerprint): its CRD, with the generations svm has seen
	// one after another with its storage version, its StorageVersion
	// object; "" when neither exists (discovery alone). A spec change
	// that leaves the storage version as it was, seen, is no change of
	// it (fingerprint.SameStorage).
	Fingerprint string
	// SettleDelay and DrainMargin apply to custom resources: a migration
	// starts only once the storage has been as it is now for their sum.
	// SettleDelay is how long an API server may take to see a CRD change
	// (there is no StorageVersion object for a CRD's resource to say when
	// every one has); DrainMargin how long after that a write it accepted
	// under the old storage version may still land in etcd (the API
	// server keeps the old storage for the requests in flight, up to
	// twice its request timeout).
	SettleDelay, DrainMargin time.Duration
	// ServersBehind, for a custom resource, says which API servers' own
	// discovery still reports another storage version than its CRD's (as
	// the function ServersBehind puts it); "" when none does or svm does
	// not read each server. While one does, the settle has not ended,
	// whatever the delay: the wait for it and the drain margin count from
	// when none does.
	ServersBehind string
}

// Encoding is what the API servers say together about one resource: the
// StorageVersion API (EncodingOf), or, where it is not served, every
// server's own discovery (EncodingOfServers).
type Encoding struct {
	// Common is the hash of the version every API server encodes the
	// resource in (status.commonEncodingVersion), "" while they disagree.
	Common string
	// Reported are the hashes of every version any API server reports
	// encoding the resource in.
	Reported []string
	// Disagreement, while Common is "", says which server reports which
	// version, or which could not be read; the StorageState shows it.
	Disagreement string
}

// CRDStorage is what a CustomResourceDefinition records about storage. The
// API server persists status.storedVersions, so it tells what may be stored
// even about changes svm did not see.
type CRDStorage struct {
	Generation int64
	// SeenAt is when svm's watch first delivered this generation of the
	// CRD; zero when svm did not see it arrive (it started later, or its
	// watch broke). The CRD's storage version as of this generation was
	// written no later, so a wait that counts from it counts from no
	// earlier than the change (see changedAt).
	SeenAt time.Time
	// StorageHash is the hash of the CRD's storage version: what
	// discovery reports once the API server has taken the CRD up, known
	// from the CRD at once.
	StorageHash string
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
	// RequeueAfter, when not zero, is when the resource is decided on
	// again: a retry falls due, or a CRD's change has settled.
	RequeueAfter time.Duration
	// Retry, with RequeueAfter, says what it waits for is the backoff
	// after svm's failed migrations to the current hash; without it, the
	// wait is for a CRD's change to settle, or the recheck of a held
	// prune, and no migration failed.
	Retry bool
	// PruneStoredVersions: a migration made at the CRD's current generation
	// succeeded, so its status.storedVersions can be cut to the storage
	// version.
	PruneStoredVersions bool
	// RecordRevision: every API server is known to store the resource in
	// the current version, and the state records no revision since when:
	// read the current etcd revision into its status's
	// CurrentStorageVersionRevision (Status, or the state's status when
	// Status is nil) before the migration is created.
	RecordRevision bool
}

// Decide applies the StorageState life-cycle to one resource.
func Decide(in Input) Decision {
	d := decide(in)
	if d.CreateMigrationFor != nil {
		d.Reason = reason(in, d)
		recordRevision(in, &d)
	}
	return d
}

// recordRevision asks d, which creates a migration, to record the etcd
// revision from which every object written is stored in the current
// version, when that is known and not yet recorded. It is known when the
// StorageVersion API, or every running server's own discovery, reports
// the servers' common encoding version (Decide creates no migration while
// they disagree), and for a custom resource, whose migration waits out the
// settle delay for every server to see its CRD. Discovery through one
// address alone is one API server's view: another may still write the old
// version.
func recordRevision(in Input, d *Decision) {
	if in.Encoding == nil && in.CRD == nil {
		return
	}
	status := d.Status
	if status == nil {
		if in.State == nil {
			return
		}
		status = &in.State.Status
	}
	d.RecordRevision = status.CurrentStorageVersionRevision == "" && status.CurrentStorageVersionHash == *d.CreateMigrationFor
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

// decide takes the life-cycle's steps in order: what the StorageVersion
// API says of the encoding (servers that disagree stop everything), then
// first sight, a storage version change, a change of storage under the
// same hash, and else following up on the current hash.
func decide(in Input) Decision {
	if in.Encoding != nil && in.Encoding.Common == "" {
		return disagree(in)
	}
	current := in.current()
	if in.State == nil {
		return firstSight(in, current)
	}
	status := recordedStatus(in.State)
	var d Decision
	gained := false
	if crdBehind(in.CRD) {
		before := len(status.PersistedStorageVersionHashes)
		status.PersistedStorageVersionHashes = union(status.PersistedStorageVersionHashes, in.CRD.StoredHashes...)
		if gained = len(status.PersistedStorageVersionHashes) > before; gained {
			d.Status = status
		}
	}
	if (in.Observed != nil || in.Encoding != nil) && !in.SkipHeartbeat {
		status.LastHeartbeatTime = metaTime(in.Now)
		d.Status = status
	}
	if status.ServersDisagree != in.ServersBehind {
		// What the state said of the servers no longer holds: they agree
		// again, svm no longer reads each one, or (a CRD) others lag.
		status.ServersDisagree = in.ServersBehind
		d.Status = status
	}
	if in.CRD != nil && in.ServersBehind != "" {
		// A server still writes the storage before: the settle starts
		// over, and no migration made before now vouches for the storage.
		status.CurrentStorageVersionSince = ptrTime(in.Now)
		status.CurrentStorageVersionRevision = ""
		d.Status = status
	}
	if current != nil && *current != status.CurrentStorageVersionHash {
		return storageChanged(in, d, status, *current)
	}
	if gained || in.Fingerprint != status.StorageFingerprint {
		d = storageMoved(in, d, status, gained)
	}
	return followUp(in, d, status)
}

// current is the resource's storage version hash as the best source says
// it: the API servers' common encoding version (StorageVersion API), the
// CRD's storage version (what every API server stores once it has seen
// the CRD), discovery (one API server's view); nil when none says.
func (in Input) current() *string {
	switch {
	case in.Encoding != nil:
		return &in.Encoding.Common
	case in.CRD != nil && in.CRD.StorageHash != "":
		return &in.CRD.StorageHash
	}
	return in.Observed
}

// storageMoved is the decision when the storage hash is the one recorded
// but the storage behind it may not be, status being the state's status as
// d leaves it: its fingerprint is not the same storage (a CRD whose storage
// version went and came back, or whose generations svm did not all see
// since, a CRD deleted and created again, a StorageVersion object
// rewritten), or the CRD's storedVersions gained a version svm had not
// recorded as possibly stored (gained). A fingerprint that is the same
// storage (the CRD's spec changed, its storage version did not) is
// recorded, and nothing else changes. Objects written meanwhile may be
// in another version, so the revision since which they are known current
// no longer holds, svm's migrations made for the storage before stop
// (their list may be older than writes still landing) and cannot vouch
// for it (madeSince), and the wait for API servers to settle and writes to
// drain starts again. A CRD created again under the name also makes any
// version possibly stored (Unknown), so that a migration of the new one
// rewrites whatever its predecessor left, and so do generations of the
// CRD svm did not see: storedVersions alone cannot say what they stored,
// as kube-controller-manager's migrator cuts them when it starts. A
// fingerprint seen for the first time (a state svm
// recorded none on) is adopted the same way, but stops nothing: those
// migrations' own fingerprints catch a change.
func storageMoved(in Input, d Decision, status *migrationv1alpha1.StorageStateStatus, gained bool) Decision {
	if moved := !fingerprint.SameStorage(status.StorageFingerprint, in.Fingerprint); gained || moved {
		if gained || status.StorageFingerprint != "" {
			d.DeleteMigrations = unfinishedOwned(in.Migrations, "")
		}
		status.CurrentStorageVersionSince = ptrTime(in.Now)
		status.CurrentStorageVersionRevision = ""
	}
	if fingerprint.Recreated(status.StorageFingerprint, in.Fingerprint) || fingerprint.GenerationsUnseen(status.StorageFingerprint, in.Fingerprint) {
		// A CRD created again under the name may stand over objects its
		// predecessor left, in any version it stored, and its
		// storedVersions start from its own storage version. Generations
		// svm did not see may have stored any version the CRD had, and
		// storedVersions may have been cut since. What was recorded
		// vouches for nothing svm did not see.
		status.PersistedStorageVersionHashes = union(status.PersistedStorageVersionHashes, migrationv1alpha1.UnknownStorageVersionHash)
	}
	status.StorageFingerprint = in.Fingerprint
	d.Status = status
	return d
}

// firstSight is the decision for a resource without a StorageState: one
// that says nothing is known about what is stored, and a migration to the
// observed hash. svm's migrations of the resource, left from a state that
// is gone, stop.
func firstSight(in Input, current *string) Decision {
	if current == nil {
		return Decision{}
	}
	hash := *current
	d := Decision{
		DeleteMigrations: unfinishedOwned(in.Migrations, ""),
		CreateState:      true,
		Status: &migrationv1alpha1.StorageStateStatus{
			PersistedStorageVersionHashes: []string{migrationv1alpha1.UnknownStorageVersionHash},
			CurrentStorageVersionHash:     hash, CurrentStorageVersionSince: ptrTime(in.changedAt()), LastHeartbeatTime: metaTime(in.Now),
			StorageFingerprint: in.Fingerprint,
		},
	}
	return in.start(d, hash)
}

// storageChanged is the decision when the storage version changed to
// hash, status being the state's status as d leaves it: objects may now be
// in either version until a migration to the new one succeeds, and svm's
// migrations to other versions stop.
func storageChanged(in Input, d Decision, status *migrationv1alpha1.StorageStateStatus, hash string) Decision {
	status.CurrentStorageVersionHash = hash
	status.CurrentStorageVersionSince = ptrTime(in.changedAt())
	status.CurrentStorageVersionRevision = ""
	status.StorageFingerprint = in.Fingerprint
	status.PersistedStorageVersionHashes = union(status.PersistedStorageVersionHashes, hash)
	d.Status = status
	d.DeleteMigrations = unfinishedOwned(in.Migrations, hash)
	if hasUnfinishedOwned(in.Migrations, hash) {
		return d
	}
	return in.start(d, hash)
}

// followUp is the decision when the current hash has not changed this
// round, status being the state's status as d leaves it: a migration that
// succeeded for it refines the persisted hashes to it alone; otherwise,
// unless one is under way, a new migration starts once due.
func followUp(in Input, d Decision, status *migrationv1alpha1.StorageStateStatus) Decision {
	current := status.CurrentStorageVersionHash
	if current == "" || current == migrationv1alpha1.UnknownStorageVersionHash || isExactly(status.PersistedStorageVersionHashes, current) {
		return d
	}
	live := countable(in)
	since := madeSince(live, status.CurrentStorageVersionSince)
	if m := lastSucceededFor(since, current); m != nil {
		if crdBehind(in.CRD) && entriesLeft(m) > 0 {
			return held(in, d, status, live, since, current, m)
		}
		status.PersistedStorageVersionHashes = []string{current}
		status.PruneHeld = nil
		d.Status = status
		d.PruneStoredVersions = crdBehind(in.CRD)
		return d
	}
	if followup.FirstActive(live) != nil || hasUnfinishedOwned(in.Migrations, current) {
		return d
	}
	if wait, retry := in.startWait(status, live, current); wait > 0 {
		d.RequeueAfter, d.Retry = wait, retry
		return d
	}
	d.CreateMigrationFor = &current
	return d
}

// held is the decision when m, the last migration to current made since
// the storage was as it is now, rewrote every object but left
// managedFields entries naming a version the CRD's storedVersions are to
// be pruned of, status being the state's status as d leaves it. Nothing
// is stored in that version, yet pruning would let it be removed from the
// CRD, after which every server-side apply on those objects fails: the
// prune is held, and the hashes the CRD lists stay persisted, as they
// would until a prune. A new migration, which moves what it can of the
// entries again, follows after a delay that doubles with each held one
// (their manager may apply through the version kept meanwhile, or a
// webhook that refused svm's write let it through), unless one is under
// way.
func held(in Input, d Decision, status *migrationv1alpha1.StorageStateStatus, live, since []migrationv1alpha1.StorageVersionMigration, current string, m *migrationv1alpha1.StorageVersionMigration) Decision {
	hold := holdOf(m)
	if prev := status.PruneHeld; prev != nil && prev.Reason == hold.Reason {
		hold.Since = prev.Since
	} else {
		hold.Since = ptrTime(in.Now)
	}
	if !equalHold(status.PruneHeld, hold) {
		status.PruneHeld = hold
		d.Status = status
	}
	if followup.FirstActive(live) != nil || hasUnfinishedOwned(in.Migrations, current) {
		return d
	}
	// A new one that failed backs off as any failure does: the held ones'
	// delay alone would follow each failure at once.
	recheck := recheckWait(since, current, in)
	if wait, retry := in.startWait(status, live, current); max(wait, recheck) > 0 {
		d.RequeueAfter, d.Retry = max(wait, recheck), retry && wait >= recheck
		return d
	}
	d.CreateMigrationFor = &current
	return d
}

// recheckWait is how long a new migration must wait after the held ones
// among ms (succeeded for current, entries left): the retry delay,
// doubling per held migration, from the last one's end.
func recheckWait(ms []migrationv1alpha1.StorageVersionMigration, current string, in Input) time.Duration {
	n, last := 0, time.Time{}
	for i := range ms {
		if m := &ms[i]; isSucceededFor(m, current) && entriesLeft(m) > 0 {
			n++
			if t := completedAt(m); t.After(last) {
				last = t
			}
		}
	}
	if n == 0 {
		return 0
	}
	return max(last.Add(followup.Backoff(in.RetryBase, in.RetryMax, n)).Sub(in.Now), 0)
}

// entriesLeft counts the managedFields entries m left naming a version to
// be pruned, whatever the reason.
func entriesLeft(m *migrationv1alpha1.StorageVersionMigration) int64 {
	return m.Status.Progress.ManagedFieldsLeft.Total()
}

// holdOf is the hold m's entries left put on the prune, with what the user
// can do about each reason.
func holdOf(m *migrationv1alpha1.StorageVersionMigration) *migrationv1alpha1.PruneHold {
	left := m.Status.Progress.ManagedFieldsLeft
	return &migrationv1alpha1.PruneHold{
		Reason:    migrationv1alpha1.PruneHeldManagedFieldsLeft,
		Entries:   left.Total(),
		Migration: m.Name,
		Message:   HoldMessage(left),
	}
}

// HoldMessage says why managedFields entries counted in left hold a prune
// of storedVersions, and what can be done, reason by reason.
func HoldMessage(left *migrationv1alpha1.ManagedFieldsLeft) string {
	msg := fmt.Sprintf("%d managedFields entries still name a version to be pruned (%s): server-side apply on their objects would fail once it is removed from the CRD.", left.Total(), left)
	if left.Denied > 0 {
		msg += " Denied: an admission webhook or policy refused svm's write that moves them; let it admit svm's writes."
	}
	if left.NotInVersion > 0 || left.NotConverted > 0 || left.Unplaced > 0 {
		msg += " NotInVersion, NotConverted, Unplaced: the fields they own have no one-to-one place in the version kept; have each manager apply through the version kept, or remove its entry."
	}
	if left.NotServed > 0 {
		msg += " NotServed: serve the version they name again, so that the API server can convert them."
	}
	if left.Refused > 0 {
		msg += " Refused: the API server refused the dry run that converts them (a conversion webhook's error, validation); fix that."
	}
	return msg + " svm tries again after its retry delay; svm retire --dry-run names the objects."
}

// equalHold reports whether two holds say the same, their time aside.
func equalHold(a, b *migrationv1alpha1.PruneHold) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Reason == b.Reason && a.Entries == b.Entries && a.Migration == b.Migration && a.Message == b.Message
}

// countable is the migrations that can vouch for what is stored: only
// those made since the state was (re)created, and while the CRD lists
// other stored versions, only svm's made at a generation with the storage
// of now (madeAtThisStorage), since the storage version cannot have
// changed during them.
func countable(in Input) []migrationv1alpha1.StorageVersionMigration {
	var live []migrationv1alpha1.StorageVersionMigration
	behind := crdBehind(in.CRD)
	for _, m := range in.Migrations {
		if m.CreationTimestamp.Before(&in.State.CreationTimestamp) {
			continue
		}
		if behind && (!IsOwned(&m) || !madeAtThisStorage(in, &m)) {
			continue
		}
		live = append(live, m)
	}
	return live
}

// madeAtThisStorage reports whether svm's migration m was made at the
// CRD's current generation, or at one that svm saw, and every one since,
// with the storage version of now: spec changes that left the storage
// version alone (a conversion webhook's caBundle rotated) do not make a
// migration made before them worthless, and one that may have hidden a
// flip and a flip back does.
func madeAtThisStorage(in Input, m *migrationv1alpha1.StorageVersionMigration) bool {
	at, err := strconv.ParseInt(m.Annotations[CRDGenerationAnnotation], 10, 64)
	return err == nil && (at == in.CRD.Generation || fingerprint.Covers(in.Fingerprint, at))
}

// madeSince is the migrations among ms made since the storage was first
// seen as it is now: only they can vouch for it. A CRD's storedVersions
// that gained an entry, with no new generation, say objects may be in that
// version whatever a migration made before found. nil since keeps them all
// (a state from before svm recorded it).
func madeSince(ms []migrationv1alpha1.StorageVersionMigration, since *metav1.Time) []migrationv1alpha1.StorageVersionMigration {
	if since == nil {
		return ms
	}
	return slices.DeleteFunc(slices.Clone(ms), func(m migrationv1alpha1.StorageVersionMigration) bool {
		return m.CreationTimestamp.Before(since)
	})
}

// startWait is how long a new migration to current must still wait, 0 for
// none: until every API server has had time to see a CRD's change and the
// writes under the storage before have drained (since the storage status,
// as this decision leaves it, was first seen), then out a growing delay if
// svm's earlier ones among live failed; retry tells the second.
func (in Input) startWait(status *migrationv1alpha1.StorageStateStatus, live []migrationv1alpha1.StorageVersionMigration, current string) (wait time.Duration, retry bool) {
	// A hash seen before svm recorded when is long settled.
	if since := status.CurrentStorageVersionSince; since != nil {
		if wait := in.settling(since.Time); wait > 0 {
			return wait, false
		}
	}
	wait = followup.NextRetry(mark.For(live, current), completedAt, in.RetryBase, in.RetryMax).Wait(in.Now)
	return wait, wait > 0
}

// start asks d for a migration to hash, first seen now (changed at
// changedAt), unless a custom resource's API servers are still settling:
// then d falls due again once they have.
func (in Input) start(d Decision, hash string) Decision {
	if wait := in.settling(in.changedAt()); wait > 0 {
		d.RequeueAfter = wait
		return d
	}
	d.CreateMigrationFor = &hash
	return d
}

// disagree is the decision while API servers encode the resource in
// different versions, as during a rolling upgrade: objects are being
// written in every reported version, so each may be stored, the current
// version is unknown, and a migration now would leave behind whatever the
// servers still on the old version write. svm's migrations of the resource
// stop; a new one starts when the servers agree (the current hash then
// changes from Unknown). The state says which server reports what.
func disagree(in Input) Decision {
	var d Decision
	status := &migrationv1alpha1.StorageStateStatus{PersistedStorageVersionHashes: []string{migrationv1alpha1.UnknownStorageVersionHash}}
	if in.State == nil {
		d.CreateState = true
	} else {
		status = recordedStatus(in.State)
	}
	status.PersistedStorageVersionHashes = union(status.PersistedStorageVersionHashes, in.Encoding.Reported...)
	if status.CurrentStorageVersionHash != migrationv1alpha1.UnknownStorageVersionHash {
		status.CurrentStorageVersionHash = migrationv1alpha1.UnknownStorageVersionHash
		status.CurrentStorageVersionSince = ptrTime(in.Now)
	}
	status.CurrentStorageVersionRevision = ""
	status.StorageFingerprint = in.Fingerprint
	status.LastHeartbeatTime = metaTime(in.Now)
	status.ServersDisagree = in.Encoding.Disagreement
	d.Status = status
	d.DeleteMigrations = unfinishedOwned(in.Migrations, "")
	return d
}

// recordedStatus is a copy of s's status. Unknown is its default
// persisted hash: a state whose status was never written (svm stopped
// between creating it and writing its status) proves nothing about what
// is stored.
func recordedStatus(s *migrationv1alpha1.StorageState) *migrationv1alpha1.StorageStateStatus {
	status := s.Status.DeepCopy()
	if len(status.PersistedStorageVersionHashes) == 0 {
		status.PersistedStorageVersionHashes = []string{migrationv1alpha1.UnknownStorageVersionHash}
	}
	return status
}

// crdBehind reports whether a CRD lists stored versions other than its
// storage version: objects may be stored in them whatever svm saw.
func crdBehind(crd *CRDStorage) bool {
	return crd != nil && len(crd.StoredHashes) > 0
}

// union is persisted with the hashes it lacks appended, in order.
func union(persisted []string, hashes ...string) []string {
	for _, h := range hashes {
		if !slices.Contains(persisted, h) {
			persisted = append(persisted, h)
		}
	}
	return persisted
}

// serverClockSlack is how much earlier than the API server's own time
// svm's reading of its clock may be (kubeclients.ServerClock: a Date to
// the second, stamped a round trip before it came), with room to spare:
// a time svm reads for when it saw a change is moved that much later, so
// that it is never before the change.
const serverClockSlack = 2 * time.Second

// changedAt is when the storage the CRD now names is known to have been
// in place: when svm's watch delivered the CRD's generation read now
// (CRDStorage.SeenAt), serverClockSlack later, rounded up to the second a
// StorageState records,
// if that is before now; now otherwise, and always while an API server
// still reports the storage before (ServersBehind: the wait counts from
// when none does). A round that runs a discovery of a thousand groups
// first reads the CRDs tens of seconds after their change; counted from
// the watch, the settle and drain waits end that much sooner, and still
// start no earlier than the change itself.
func (in Input) changedAt() time.Time {
	if in.CRD == nil || in.CRD.SeenAt.IsZero() || in.ServersBehind != "" {
		return in.Now
	}
	seen := in.CRD.SeenAt.Add(serverClockSlack)
	at := seen.Truncate(time.Second)
	if at.Before(seen) {
		at = at.Add(time.Second)
	}
	if at.Before(in.Now) {
		return at
	}
	return in.Now
}

// settling is how long a custom resource's migration must still wait for
// API servers to settle on storage first seen as it is at since, and for
// the writes they accepted under the storage before to drain; 0 for none.
// Until then a write in flight under the old storage version may land
// after the migration's list and be taken for a write in the new one.
func (in Input) settling(since time.Time) time.Duration {
	wait := in.SettleDelay + in.DrainMargin
	if in.CRD == nil || wait <= 0 {
		return 0
	}
	return max(metaTime(since).Add(wait).Sub(in.Now), 0)
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

// mark is how the trigger marks its migrations and records the hash each
// was made for.
var mark = followup.Trigger

// IsOwned reports whether svm's trigger created m.
func IsOwned(m *migrationv1alpha1.StorageVersionMigration) bool {
	return mark.Owns(m)
}

// TargetHash is the hash an owned migration was created for.
func TargetHash(m *migrationv1alpha1.StorageVersionMigration) string {
	return mark.Target(m)
}

// unfinishedOwned names svm's unfinished migrations for any hash but keep,
// sorted.
func unfinishedOwned(ms []migrationv1alpha1.StorageVersionMigration, keep string) []string {
	out := mark.Unfinished(ms, keep)
	slices.Sort(out)
	return out
}

// hasUnfinishedOwned reports whether a migration of svm's to hash is
// under way.
func hasUnfinishedOwned(ms []migrationv1alpha1.StorageVersionMigration, hash string) bool {
	return followup.FirstActive(mark.For(ms, hash)) != nil
}

// lastSucceededFor is the migration of ms made for hash that succeeded
// last (an owned one created for it, or a user's that recorded it as its
// target), nil when none did.
func lastSucceededFor(ms []migrationv1alpha1.StorageVersionMigration, hash string) *migrationv1alpha1.StorageVersionMigration {
	var last *migrationv1alpha1.StorageVersionMigration
	for i := range ms {
		if m := &ms[i]; isSucceededFor(m, hash) && (last == nil || completedAt(m).After(completedAt(last))) {
			last = m
		}
	}
	return last
}

// isSucceededFor reports whether m was made for hash and succeeded.
func isSucceededFor(m *migrationv1alpha1.StorageVersionMigration, hash string) bool {
	if !m.HasCondition(migrationv1alpha1.MigrationSucceeded) || m.Status.StorageVersionHash != hash {
		return false
	}
	return !IsOwned(m) || TargetHash(m) == hash
}

// completedAt is when a finished migration ended.
func completedAt(m *migrationv1alpha1.StorageVersionMigration) time.Time {
	if m.Status.CompletionTime != nil {
		return m.Status.CompletionTime.Time
	}
	return m.CreationTimestamp.Time
}

func isExactly(hashes []string, hash string) bool {
	return len(hashes) == 1 && hashes[0] == hash
}
