package rotation

import (
	"fmt"
	"slices"
	"strings"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/followup"
)

const (
	// CreatedByLabel marks the migrations svm creates to re-encrypt; it is
	// the trigger's label, with a value of its own.
	CreatedByLabel = followup.CreatedByLabel
	// CreatedByValue is CreatedByLabel's value on re-encryption migrations.
	CreatedByValue = "svm-encryption"
	// ConfigHashAnnotation records the encryption configuration every API
	// server had loaded when a re-encryption migration was created.
	ConfigHashAnnotation = "migration.k8s.io/encryption-config-hash"
)

// Input is what Decide knows about one resource svm re-encrypts.
type Input struct {
	Now time.Time
	// Resource names the resource in messages, as an operator writes it.
	Resource string
	// Agreement is what the API servers have loaded.
	Agreement Agreement
	// State is the resource's StorageState, nil when there is none.
	State *migrationv1alpha1.StorageState
	// Migrations are the resource's migrations, all of them.
	Migrations []migrationv1alpha1.StorageVersionMigration
	// RetryBase and RetryMax bound the delay before a failed re-encryption
	// is followed by a new one: RetryBase doubling per failure.
	RetryBase, RetryMax time.Duration
}

// Decision is what to do for one resource, in order: delete, then write
// the status, then create the migration.
type Decision struct {
	// DeleteMigrations names svm's unfinished re-encryptions to stop.
	DeleteMigrations []string
	// Status, when set, is the StorageState's new status.encryption; the
	// state is to be created when there is none.
	Status *migrationv1alpha1.StorageEncryption
	// CreateMigration asks for a re-encryption under Agreement.ConfigHash.
	CreateMigration bool
	// Rewritten is set when this decision records a completed
	// re-encryption.
	Rewritten bool
	// RequeueAfter, when not zero, is when a retry falls due.
	RequeueAfter time.Duration
}

// Decide applies the re-encryption rule to one resource.
func Decide(in Input) Decision {
	var old *migrationv1alpha1.StorageEncryption
	if in.State != nil {
		old = in.State.Status.Encryption
	}
	d, status := decide(in, old)
	// Write the status only when it changes.
	if status != nil && (old == nil || !apiequality.Semantic.DeepEqual(old, status)) {
		d.Status = status
	}
	return d
}

// decide is the decision for the agreement, and the status.encryption to
// record, nil for none: old, the one recorded, is not changed.
func decide(in Input, old *migrationv1alpha1.StorageEncryption) (Decision, *migrationv1alpha1.StorageEncryption) {
	a := in.Agreement
	switch {
	case !a.Agreed:
		// Until the servers agree, a re-encryption would be redone by any
		// server still writing with another configuration. A server svm
		// could not read is no news about encryption unless one it read
		// encrypts.
		return wait(in, old)
	case !a.Encrypting():
		return stop(in, old, false, "No API server has an encryption configuration loaded: objects are written unencrypted")
	}
	return encrypt(in, editable(old))
}

// wait is the decision while the servers cannot be taken to agree: none
// starts, and svm's re-encryptions stop when a server read has loaded a
// configuration other than theirs, since it would write objects under it.
// One that no server read contradicts goes on: the servers that could not
// be read (a timeout, a restart) are no news, and stopping it would throw
// its progress away. Should one of them have loaded another configuration
// after all, its metrics date the load after the re-encryption was made:
// the look that reads it stops the re-encryption or, should the servers
// agree again, credits it with nothing (madeSince) and makes another.
func wait(in Input, old *migrationv1alpha1.StorageEncryption) (Decision, *migrationv1alpha1.StorageEncryption) {
	a := in.Agreement
	d, status := stop(in, old, a.anyConfig(), "Waiting: "+a.Waiting)
	var stopped, goesOn []string
	for _, name := range d.DeleteMigrations {
		i := slices.IndexFunc(in.Migrations, func(m migrationv1alpha1.StorageVersionMigration) bool { return m.Name == name })
		if t := mark.Target(&in.Migrations[i]); !a.Contradicts(t) {
			goesOn = append(goesOn, fmt.Sprintf("%s (%s)", name, describe(splitTarget(t))))
			continue
		}
		stopped = append(stopped, name)
	}
	d.DeleteMigrations = stopped
	if status != nil && len(goesOn) > 0 {
		status.Message += "; re-encryption " + strings.Join(goesOn, ", ") + " goes on, since no API server read has loaded another configuration or answers another KMS v2 key"
	}
	return d, status
}

// stop is the decision when no re-encryption may run: svm's stop, and the
// status says why, with no configuration current. When nothing was
// recorded and there is no news about encryption, nothing is.
func stop(in Input, old *migrationv1alpha1.StorageEncryption, news bool, why string) (Decision, *migrationv1alpha1.StorageEncryption) {
	d := Decision{DeleteMigrations: mark.Unfinished(in.Migrations, "")}
	if old == nil && !news {
		return d, nil
	}
	status := editable(old)
	status.ConfigHash, status.KMSKeys = "", nil
	status.Message = why
	return d, status
}

// encrypt is the decision while every server has loaded the configuration
// Agreement.ConfigHash and writes under Agreement.KMSKeys: record a
// re-encryption under them that succeeded, or wait for the one under way,
// or start one once the failed ones allow. status is changed to what to
// record.
//
// A KMS v2 key rotation is a new target as a new configuration is: the
// objects are all rewritten again, whichever resources the provider
// encrypts, since no metric ties a key to a resource. The rewrite costs
// little where nothing changed: the API server skips the write of an
// object already under its current key and configuration.
func encrypt(in Input, status *migrationv1alpha1.StorageEncryption) (Decision, *migrationv1alpha1.StorageEncryption) {
	a := in.Agreement
	t, under := a.Target(), describe(a.ConfigHash, a.KMSKeys)
	status.ConfigHash, status.KMSKeys = a.ConfigHash, slices.Clone(a.KMSKeys)
	d := Decision{DeleteMigrations: mark.Unfinished(in.Migrations, t)}
	if target(status.RewrittenConfigHash, status.RewrittenKMSKeys) == t {
		status.Message = rewrittenMessage(in.Resource, status)
		return d, status
	}
	live := madeSince(in.Migrations, a.Since)
	if m := lastSucceeded(live); m != nil {
		status.RewrittenConfigHash, status.RewrittenKMSKeys = a.ConfigHash, slices.Clone(a.KMSKeys)
		status.RewrittenTime, status.RewrittenBy = metav1Time(finishedAt(m)), m.Name
		status.Message = rewrittenMessage(in.Resource, status)
		d.Rewritten = true
		return d, status
	}
	if m := followup.FirstActive(live); m != nil {
		status.Message = fmt.Sprintf("Re-encrypting every object under %s (migration %s); until it succeeds, keys of earlier configurations are still needed", under, m.Name)
		return d, status
	}
	if r := followup.NextRetry(mark.For(live, t), finishedAt, in.RetryBase, in.RetryMax); r.Wait(in.Now) > 0 {
		d.RequeueAfter = r.Wait(in.Now)
		status.Message = fmt.Sprintf("Re-encryption under %s failed %d time(s); the next starts at %s; until one succeeds, keys of earlier configurations are still needed", under, r.Failures, r.Due.UTC().Format(time.RFC3339))
		return d, status
	}
	d.CreateMigration = true
	status.Message = fmt.Sprintf("Re-encrypting every object under %s; until it succeeds, keys of earlier configurations are still needed", under)
	return d, status
}

// editable is a copy of the recorded status.encryption to change, an empty
// one when none was recorded.
func editable(old *migrationv1alpha1.StorageEncryption) *migrationv1alpha1.StorageEncryption {
	if old == nil {
		return &migrationv1alpha1.StorageEncryption{}
	}
	return old.DeepCopy()
}

// madeSince is the migrations of ms created at or after since. A migration
// created after every server had loaded the configuration rewrites every
// object under it, whoever made it: svm's re-encryption, the trigger's, a
// user's. Others prove nothing, and neither does one that skipped objects
// written since a storage version change (writtenSinceChange): they may
// have been written under an earlier configuration.
func madeSince(ms []migrationv1alpha1.StorageVersionMigration, since time.Time) []migrationv1alpha1.StorageVersionMigration {
	var live []migrationv1alpha1.StorageVersionMigration
	for _, m := range ms {
		// Creation times are kept to the second.
		if !m.CreationTimestamp.Time.Before(since.Truncate(time.Second)) && m.Status.Progress.WrittenSinceChange == 0 {
			live = append(live, m)
		}
	}
	return live
}

// Current reports whether a resource's recorded re-encryption is under
// the configuration and KMS v2 keys the servers agree on now: the old
// keys are then no longer needed for it.
func Current(a Agreement, e *migrationv1alpha1.StorageEncryption) bool {
	return a.Encrypting() && e != nil && e.RewrittenConfigHash == a.ConfigHash && sameKeys(e.RewrittenKMSKeys, a.KMSKeys)
}

func rewrittenMessage(resource string, s *migrationv1alpha1.StorageEncryption) string {
	at := ""
	if s.RewrittenTime != nil {
		at = " at " + s.RewrittenTime.UTC().Format(time.RFC3339)
	}
	unused := "keys the configuration only reads with"
	if len(s.RewrittenKMSKeys) > 0 {
		unused += " or KMS v2 keys other than these"
	}
	return fmt.Sprintf("Every object of %s was rewritten under %s%s (migration %s): objects written through the API no longer need %s",
		resource, describe(s.RewrittenConfigHash, s.RewrittenKMSKeys), at, s.RewrittenBy, unused)
}

// mark is how the re-encryption marks its migrations and records the
// configuration each was made under.
var mark = followup.Mark{Value: CreatedByValue, TargetKey: ConfigHashAnnotation, AlsoKey: KMSKeysAnnotation}

// IsOwned reports whether m is a re-encryption svm created.
func IsOwned(m *migrationv1alpha1.StorageVersionMigration) bool {
	return mark.Owns(m)
}

func lastSucceeded(ms []migrationv1alpha1.StorageVersionMigration) *migrationv1alpha1.StorageVersionMigration {
	var last *migrationv1alpha1.StorageVersionMigration
	for i := range ms {
		if m := &ms[i]; m.HasCondition(migrationv1alpha1.MigrationSucceeded) && (last == nil || finishedAt(m).After(finishedAt(last))) {
			last = m
		}
	}
	return last
}

// finishedAt is when m's Succeeded or Failed condition was set.
func finishedAt(m *migrationv1alpha1.StorageVersionMigration) time.Time {
	for _, c := range m.Status.Conditions {
		if (c.Type == migrationv1alpha1.MigrationSucceeded || c.Type == migrationv1alpha1.MigrationFailed) && c.Status == "True" {
			return c.LastUpdateTime.Time
		}
	}
	return m.CreationTimestamp.Time
}

func metav1Time(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	// The API keeps times to the second: a finer one would differ from
	// what is read back, and be written again every round.
	mt := metav1.NewTime(t.Truncate(time.Second))
	return &mt
}
