package rotation

import (
	"fmt"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
)

const (
	// CreatedByLabel marks the migrations svm creates to re-encrypt; it is
	// the trigger's label, with a value of its own.
	CreatedByLabel = "migration.k8s.io/created-by"
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
func Decide(in Input) (d Decision) {
	var old *migrationv1alpha1.StorageEncryption
	if in.State != nil {
		old = in.State.Status.Encryption
	}
	status := old.DeepCopy()
	if status == nil {
		status = &migrationv1alpha1.StorageEncryption{}
	}
	// Write the status only when it changes.
	defer func() {
		if status != nil && (old == nil || !apiequality.Semantic.DeepEqual(old, status)) {
			d.Status = status
		}
	}()
	a := in.Agreement
	if !a.Agreed {
		// Until the servers agree, a re-encryption would be redone by any
		// server still writing with another configuration: stop svm's.
		d.DeleteMigrations = unfinished(in.Migrations, "")
		if old == nil && !a.anyConfig() {
			// No server reached encrypts and nothing was ever recorded:
			// a server svm could not read is no news about encryption.
			status = nil
			return d
		}
		status.ConfigHash, status.ConfigSince = "", nil
		status.Message = "Waiting: " + a.Waiting
		return d
	}
	if !a.Encrypting() {
		d.DeleteMigrations = unfinished(in.Migrations, "")
		if old == nil {
			status = nil // nothing encrypted, nothing recorded: nothing to say
			return d
		}
		status.ConfigHash, status.ConfigSince = "", nil
		status.Message = "No API server has an encryption configuration loaded: objects are written unencrypted"
		return d
	}
	hash := a.ConfigHash
	status.ConfigHash, status.ConfigSince = hash, metav1Time(a.Since)
	d.DeleteMigrations = unfinished(in.Migrations, hash)
	if status.RewrittenConfigHash == hash {
		status.Message = rewrittenMessage(in.Resource, status)
		return d
	}
	// A migration created after every server had loaded the configuration
	// rewrites every object under it, whoever made it: svm's
	// re-encryption, the trigger's, a user's. Others prove nothing.
	var live, own []*migrationv1alpha1.StorageVersionMigration
	for i := range in.Migrations {
		m := &in.Migrations[i]
		// Creation times are kept to the second.
		if m.CreationTimestamp.Time.Before(a.Since.Truncate(time.Second)) {
			continue
		}
		live = append(live, m)
		if IsOwned(m) && m.Annotations[ConfigHashAnnotation] == hash {
			own = append(own, m)
		}
	}
	if m := lastSucceeded(live); m != nil {
		status.RewrittenConfigHash, status.RewrittenTime, status.RewrittenBy = hash, metav1Time(finishedAt(m)), m.Name
		status.Message = rewrittenMessage(in.Resource, status)
		d.Rewritten = true
		return d
	}
	for _, m := range live {
		if !m.IsFinished() && m.DeletionTimestamp == nil {
			status.Message = fmt.Sprintf("Re-encrypting every object under configuration %s (migration %s); until it succeeds, keys of earlier configurations are still needed", hash, m.Name)
			return d
		}
	}
	if failures, last := failed(own); failures > 0 {
		due := last.Add(backoff(in.RetryBase, in.RetryMax, failures))
		if in.Now.Before(due) {
			d.RequeueAfter = due.Sub(in.Now)
			status.Message = fmt.Sprintf("Re-encryption under configuration %s failed %d time(s); the next starts at %s; until one succeeds, keys of earlier configurations are still needed", hash, failures, due.UTC().Format(time.RFC3339))
			return d
		}
	}
	d.CreateMigration = true
	status.Message = fmt.Sprintf("Re-encrypting every object under configuration %s; until it succeeds, keys of earlier configurations are still needed", hash)
	return d
}

// Current reports whether a resource's recorded re-encryption is under
// the configuration the servers agree on now: the old keys are then no
// longer needed for it.
func Current(a Agreement, e *migrationv1alpha1.StorageEncryption) bool {
	return a.Encrypting() && e != nil && e.RewrittenConfigHash == a.ConfigHash
}

func rewrittenMessage(resource string, s *migrationv1alpha1.StorageEncryption) string {
	at := ""
	if s.RewrittenTime != nil {
		at = " at " + s.RewrittenTime.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("Every object of %s was rewritten under configuration %s%s (migration %s): objects written through the API no longer need keys the configuration only reads with", resource, s.RewrittenConfigHash, at, s.RewrittenBy)
}

// IsOwned reports whether m is a re-encryption svm created.
func IsOwned(m *migrationv1alpha1.StorageVersionMigration) bool {
	return m.Labels[CreatedByLabel] == CreatedByValue
}

// unfinished names svm's unfinished re-encryptions not under keep.
func unfinished(ms []migrationv1alpha1.StorageVersionMigration, keep string) []string {
	var out []string
	for i := range ms {
		m := &ms[i]
		if IsOwned(m) && !m.IsFinished() && m.DeletionTimestamp == nil && (keep == "" || m.Annotations[ConfigHashAnnotation] != keep) {
			out = append(out, m.Name)
		}
	}
	return out
}

func lastSucceeded(ms []*migrationv1alpha1.StorageVersionMigration) *migrationv1alpha1.StorageVersionMigration {
	var last *migrationv1alpha1.StorageVersionMigration
	for _, m := range ms {
		if m.HasCondition(migrationv1alpha1.MigrationSucceeded) && (last == nil || finishedAt(m).After(finishedAt(last))) {
			last = m
		}
	}
	return last
}

func failed(ms []*migrationv1alpha1.StorageVersionMigration) (int, time.Time) {
	n, last := 0, time.Time{}
	for _, m := range ms {
		if m.HasCondition(migrationv1alpha1.MigrationFailed) {
			n++
			if t := finishedAt(m); t.After(last) {
				last = t
			}
		}
	}
	return n, last
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

func backoff(base, maxDelay time.Duration, failures int) time.Duration {
	d := base
	for i := 1; i < failures && d < maxDelay; i++ {
		d *= 2
	}
	return min(d, maxDelay)
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
