package status

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/rotation"
)

// Version identifies the shape of Report. Fields may be added under the
// same version; a field that is removed, renamed or changes meaning makes a
// new version, so a script can check it before trusting the rest.
//
// v2: progress counts restored, alreadyCurrent, writtenSinceStart and gone
// where v1 had rewritten (which counted objects the API server left as
// they were) and skipped.
const Version = "v2"

// Report is everything `svm status` shows, and the document printed by
// `svm status -o json` and `-o yaml`.
type Report struct {
	// Version is the Version of this structure.
	Version string `json:"version"`
	// Time is when the objects were read; ages, rates and estimates are
	// relative to it.
	Time metav1.Time `json:"time"`
	// SVMAPIServed says whether the server serves svm's
	// migration.k8s.io/v1alpha1 API (whether svm's CRDs are installed).
	// Without it there are no svm migrations and no storage states.
	SVMAPIServed bool `json:"svmAPIServed"`
	// InTreeAPIServed says whether the server serves the in-tree
	// storagemigration.k8s.io/v1 API.
	InTreeAPIServed bool `json:"inTreeAPIServed"`
	// Migrations are svm's and the in-tree migrations, in the order the
	// table shows them: Running, Retrying, Pending, Failed, Succeeded, then
	// oldest first.
	Migrations []Migration `json:"migrations"`
	// StorageStates are svm's StorageStates, by name.
	StorageStates []StorageState `json:"storageStates"`
	// Encryption is where encryption at rest stands. Absent when no API
	// server reported an encryption configuration and no StorageState
	// records a re-encryption: a cluster without encryption at rest has
	// nothing to show.
	Encryption *Encryption `json:"encryption,omitempty"`
}

// Source says which API a migration belongs to.
type Source string

const (
	// SourceSVM is svm's migration.k8s.io/v1alpha1 StorageVersionMigration.
	SourceSVM Source = "svm"
	// SourceInTree is the in-tree storagemigration.k8s.io/v1
	// StorageVersionMigration, run by kube-controller-manager.
	SourceInTree Source = "in-tree"
)

// State is where a migration stands, derived from its conditions.
type State string

const (
	// StatePending: no condition is True yet; nothing has run.
	StatePending State = "Pending"
	// StateRunning: Running is True.
	StateRunning State = "Running"
	// StateRetrying: Running is True with reason Retrying. svm hit trouble
	// that outlived its retries and will try again after a backoff; the
	// message says what went wrong.
	StateRetrying State = "Retrying"
	// StateSucceeded: Succeeded is True.
	StateSucceeded State = "Succeeded"
	// StateFailed: Failed is True; reason and message say why.
	StateFailed State = "Failed"
)

// stateOrder puts the migrations an operator acts on first: the ones
// moving, then the ones waiting, then the finished ones, failures before
// successes.
var stateOrder = map[State]int{StateRunning: 0, StateRetrying: 1, StatePending: 2, StateFailed: 3, StateSucceeded: 4}

// reasonRetrying is the Running condition's reason the migration
// controller sets while it waits to retry (migration.ReasonRetrying; this
// package reads objects and does not import the controller).
const reasonRetrying = "Retrying"

// Migration is one row of the migrations table.
type Migration struct {
	Name   string `json:"name"`
	Source Source `json:"source"`
	// Group is the API group of the migrated resource; empty for the core
	// group.
	Group    string `json:"group,omitempty"`
	Resource string `json:"resource"`
	State    State  `json:"state"`
	// Reason and Message are those of the condition that decided the
	// state (Failed, Succeeded or Running), in full; the table truncates
	// the message.
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`

	CreationTimestamp metav1.Time  `json:"creationTimestamp"`
	StartTime         *metav1.Time `json:"startTime,omitempty"`
	CompletionTime    *metav1.Time `json:"completionTime,omitempty"`

	// InTreeMigration, on an svm migration, names the in-tree migration
	// kube-controller-manager runs for it: svm handed the rewriting over
	// and counts nothing itself.
	InTreeMigration string `json:"inTreeMigration,omitempty"`

	// RefusedBy are the admission webhooks and policies that refused
	// svm's writes, each with the objects it left unmigrated.
	RefusedBy []migrationv1alpha1.AdmissionRefusal `json:"refusedBy,omitempty"`

	// Progress counts objects; the in-tree API reports none, so it is
	// absent for in-tree migrations and for svm migrations executed by
	// one.
	Progress *Progress `json:"progress,omitempty"`
	// ObjectsPerSecond is the objects handled (migrated, skipped or
	// failed) per second from startTime to completionTime, or to Time
	// while unfinished, rounded to two decimals. Absent before the start.
	ObjectsPerSecond *float64 `json:"objectsPerSecond,omitempty"`
	// ETASeconds estimates the seconds left at ObjectsPerSecond. Present
	// only while Running, with a known total and a rate above zero.
	ETASeconds *int64 `json:"etaSeconds,omitempty"`
	// Pacing is adaptive pacing's state at the migration's last saved
	// chunk (its status.pacing). Present only while Running.
	Pacing *migrationv1alpha1.MigrationPacing `json:"pacing,omitempty"`
}

// Progress is a migration's counters (see the API's MigrationProgress)
// and the total they are heading to.
type Progress struct {
	Listed int64 `json:"listed"`
	// Migrated is Restored plus AlreadyCurrent: the objects svm wrote.
	Migrated          int64 `json:"migrated"`
	Restored          int64 `json:"restored"`
	AlreadyCurrent    int64 `json:"alreadyCurrent"`
	WrittenSinceStart int64 `json:"writtenSinceStart"`
	// WrittenSinceChange is the objects skipped without a request:
	// written after the storage version change, before the migration.
	WrittenSinceChange int64 `json:"writtenSinceChange"`
	Gone               int64 `json:"gone"`
	Failed             int64 `json:"failed"`
	// ThroughStatus is the part of Migrated written through the status
	// subresource after an admission webhook or policy refused the
	// object's own write.
	ThroughStatus int64 `json:"throughStatus,omitempty"`
	// ManagedFieldsMoved is the objects whose managedFields entries svm
	// moved off the versions a CRD's storedVersions is to be pruned of;
	// ManagedFieldsLeft, the entries it left naming them, by why.
	ManagedFieldsMoved int64                                `json:"managedFieldsMoved,omitempty"`
	ManagedFieldsLeft  *migrationv1alpha1.ManagedFieldsLeft `json:"managedFieldsLeft,omitempty"`
	RemainingEstimate  *int64                               `json:"remainingEstimate,omitempty"`
	// Total is listed plus the remaining estimate when the server gave
	// one, else listed.
	Total int64 `json:"total"`
	// TotalKnown is false while the migration is unfinished and the server
	// gave no estimate: more objects may come, so Total is a lower bound.
	TotalKnown bool `json:"totalKnown"`
}

// handled is every object the migration is done with.
func (p *Progress) handled() int64 {
	return p.Migrated + p.WrittenSinceStart + p.WrittenSinceChange + p.Gone + p.Failed
}

// StorageState is one row of the storage states table.
type StorageState struct {
	Name     string `json:"name"`
	Group    string `json:"group,omitempty"`
	Resource string `json:"resource"`
	// CurrentStorageVersionHash and PersistedStorageVersionHashes are the
	// StorageState's status, unchanged.
	CurrentStorageVersionHash     string   `json:"currentStorageVersionHash"`
	PersistedStorageVersionHashes []string `json:"persistedStorageVersionHashes"`
	// Migrated is true when the persisted hashes are the current hash
	// alone: every stored object is known to be in the current storage
	// version. An "Unknown" or empty current hash is never migrated.
	Migrated          bool         `json:"migrated"`
	LastHeartbeatTime *metav1.Time `json:"lastHeartbeatTime,omitempty"`
	// PruneHeld, the StorageState's status.pruneHeld, says why svm keeps
	// versions in the CRD's storedVersions that no object is stored in.
	PruneHeld *migrationv1alpha1.PruneHold `json:"pruneHeld,omitempty"`
	// ServersDisagree, the StorageState's status.serversDisagree, says
	// which API server stores the resource in which version, or which
	// could not be read, while svm cannot tell that they agree.
	ServersDisagree string `json:"serversDisagree,omitempty"`
}

// Input is what Build needs: the objects as listed, and when.
type Input struct {
	// Now is when the objects were read.
	Now time.Time
	// SVMServed says whether svm's API is served; Migrations and
	// StorageStates are ignored when it is not.
	SVMServed     bool
	Migrations    []migrationv1alpha1.StorageVersionMigration
	StorageStates []migrationv1alpha1.StorageState
	// InTreeServed says whether storagemigration.k8s.io/v1 is served;
	// InTreeMigrations are ignored when it is not.
	InTreeServed     bool
	InTreeMigrations []storagemigrationv1.StorageVersionMigration
	// Encryption is what the API servers reported about their
	// encryption-at-rest configurations, put together; nil when it was
	// not read.
	Encryption *rotation.Agreement
	// EncryptionError says why the API servers could not all be known
	// (their identity leases could not be listed, say): Encryption then
	// takes the servers it reached to be all, and the verdict says so.
	EncryptionError string
}

// Build turns in into a Report.
func Build(in Input) *Report {
	r := &Report{
		Version: Version, Time: metav1.NewTime(in.Now),
		SVMAPIServed: in.SVMServed, InTreeAPIServed: in.InTreeServed,
		// Empty, not nil: scripts get [] rather than null.
		Migrations: []Migration{}, StorageStates: []StorageState{},
	}
	if in.SVMServed {
		for i := range in.Migrations {
			r.Migrations = append(r.Migrations, svmMigration(&in.Migrations[i], in.Now))
		}
		for i := range in.StorageStates {
			r.StorageStates = append(r.StorageStates, storageState(&in.StorageStates[i]))
		}
	}
	if in.InTreeServed {
		for i := range in.InTreeMigrations {
			r.Migrations = append(r.Migrations, inTreeMigration(&in.InTreeMigrations[i]))
		}
	}
	slices.SortStableFunc(r.Migrations, func(a, b Migration) int {
		return cmp.Or(
			cmp.Compare(stateOrder[a.State], stateOrder[b.State]),
			a.CreationTimestamp.Compare(b.CreationTimestamp.Time),
			cmp.Compare(a.Source, b.Source),
			cmp.Compare(a.Name, b.Name),
		)
	})
	slices.SortFunc(r.StorageStates, func(a, b StorageState) int { return cmp.Compare(a.Name, b.Name) })
	r.Encryption = buildEncryption(in)
	return r
}

func svmMigration(m *migrationv1alpha1.StorageVersionMigration, now time.Time) Migration {
	row := Migration{
		Name: m.Name, Source: SourceSVM,
		Group: m.Spec.Resource.Group, Resource: m.Spec.Resource.Resource,
		CreationTimestamp: m.CreationTimestamp,
		StartTime:         m.Status.StartTime.DeepCopy(),
		CompletionTime:    m.Status.CompletionTime.DeepCopy(),
	}
	row.State, row.Reason, row.Message = svmState(m)
	if m.Status.InTreeMigration != "" {
		// The in-tree migration's own row, of the same name, shows how it
		// goes; svm's counters would only show zeros.
		row.InTreeMigration = m.Status.InTreeMigration
		return row
	}
	p := m.Status.Progress
	pr := &Progress{Listed: p.Listed, Migrated: p.Migrated(), Restored: p.Restored, AlreadyCurrent: p.AlreadyCurrent,
		WrittenSinceStart: p.WrittenSinceStart, WrittenSinceChange: p.WrittenSinceChange, Gone: p.Gone, Failed: p.Failed,
		ThroughStatus: p.ThroughStatus, ManagedFieldsMoved: p.ManagedFieldsMoved, ManagedFieldsLeft: p.ManagedFieldsLeft.DeepCopy(), Total: p.Listed}
	row.RefusedBy = slices.Clone(m.Status.RefusedBy)
	// A finished migration has listed everything there was.
	pr.TotalKnown = row.State == StateSucceeded || row.State == StateFailed
	if p.RemainingEstimate != nil {
		// The estimate stays on a migration that failed part way, so its
		// total still shows how far it got.
		remaining := *p.RemainingEstimate
		pr.RemainingEstimate = &remaining
		pr.Total += remaining
		pr.TotalKnown = true
	}
	row.Progress = pr
	if row.State == StateRunning && m.Status.Pacing != nil {
		row.Pacing = m.Status.Pacing.DeepCopy()
	}

	if m.Status.StartTime == nil {
		return row
	}
	end := now
	if m.Status.CompletionTime != nil {
		end = m.Status.CompletionTime.Time
	}
	elapsed := end.Sub(m.Status.StartTime.Time).Seconds()
	if elapsed <= 0 {
		return row
	}
	rate := float64(pr.handled()) / elapsed
	rounded := math.Round(rate*100) / 100
	row.ObjectsPerSecond = &rounded
	if row.State == StateRunning && rate > 0 && pr.TotalKnown {
		eta := int64(math.Ceil(float64(max(0, pr.Total-pr.handled())) / rate))
		row.ETASeconds = &eta
	}
	return row
}

// svmState reads the state from the conditions. Failed and Succeeded are
// final and win over a Running condition left True by a crash.
func svmState(m *migrationv1alpha1.StorageVersionMigration) (State, string, string) {
	find := func(t migrationv1alpha1.MigrationConditionType) *migrationv1alpha1.MigrationCondition {
		for i, c := range m.Status.Conditions {
			if c.Type == t && c.Status == corev1.ConditionTrue {
				return &m.Status.Conditions[i]
			}
		}
		return nil
	}
	if c := find(migrationv1alpha1.MigrationFailed); c != nil {
		return StateFailed, c.Reason, c.Message
	}
	if c := find(migrationv1alpha1.MigrationSucceeded); c != nil {
		return StateSucceeded, c.Reason, c.Message
	}
	if c := find(migrationv1alpha1.MigrationRunning); c != nil {
		if c.Reason == reasonRetrying {
			return StateRetrying, c.Reason, c.Message
		}
		return StateRunning, c.Reason, c.Message
	}
	return StatePending, "", ""
}

func inTreeMigration(m *storagemigrationv1.StorageVersionMigration) Migration {
	row := Migration{
		Name: m.Name, Source: SourceInTree,
		Group: m.Spec.Resource.Group, Resource: m.Spec.Resource.Resource,
		CreationTimestamp: m.CreationTimestamp,
		State:             StatePending,
	}
	for _, s := range []struct {
		t     storagemigrationv1.MigrationConditionType
		state State
	}{
		{storagemigrationv1.MigrationFailed, StateFailed},
		{storagemigrationv1.MigrationSucceeded, StateSucceeded},
		{storagemigrationv1.MigrationRunning, StateRunning},
	} {
		if c := meta.FindStatusCondition(m.Status.Conditions, string(s.t)); c != nil && c.Status == metav1.ConditionTrue {
			row.State, row.Reason, row.Message = s.state, c.Reason, c.Message
			break
		}
	}
	return row
}

func storageState(s *migrationv1alpha1.StorageState) StorageState {
	current := s.Status.CurrentStorageVersionHash
	persisted := append([]string{}, s.Status.PersistedStorageVersionHashes...)
	row := StorageState{
		Name: s.Name, Group: s.Spec.Resource.Group, Resource: s.Spec.Resource.Resource,
		CurrentStorageVersionHash:     current,
		PersistedStorageVersionHashes: persisted,
		Migrated: len(persisted) == 1 && persisted[0] == current &&
			current != "" && current != migrationv1alpha1.UnknownStorageVersionHash,
	}
	if !s.Status.LastHeartbeatTime.IsZero() {
		row.LastHeartbeatTime = s.Status.LastHeartbeatTime.DeepCopy()
	}
	row.PruneHeld = s.Status.PruneHeld.DeepCopy()
	row.ServersDisagree = s.Status.ServersDisagree
	return row
}

// Summary counts the migrations by state in one line, for the foot of
// `svm status --watch`: "5 migrations: 1 running, 1 pending, 3 succeeded".
func Summary(r *Report) string {
	if len(r.Migrations) == 0 {
		return "no migrations"
	}
	counts := map[State]int{}
	for _, m := range r.Migrations {
		counts[m.State]++
	}
	var parts []string
	for _, s := range []State{StateRunning, StateRetrying, StatePending, StateFailed, StateSucceeded} {
		if counts[s] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[s], strings.ToLower(string(s))))
		}
	}
	noun := "migrations"
	if len(r.Migrations) == 1 {
		noun = "migration"
	}
	return fmt.Sprintf("%d %s: %s", len(r.Migrations), noun, strings.Join(parts, ", "))
}
