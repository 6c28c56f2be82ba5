package migration

import (
	"slices"
	"strings"
	"time"

	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/intree"
	"github.com/svm-project/svm/internal/trigger"
)

// ScheduleInput is everything Schedule decides from.
type ScheduleInput struct {
	// Migrations are all StorageVersionMigrations, as cached.
	Migrations []migrationv1alpha1.StorageVersionMigration
	// InTree are the in-tree storagemigration.k8s.io migrations, as
	// cached; none where that API is not served.
	InTree []storagemigrationv1.StorageVersionMigration
	// Running names the migrations executing now.
	Running map[string]bool
	// NotBefore holds migrations that failed transiently and wait for their
	// backoff to end.
	NotBefore map[string]time.Time
	// Ended holds the UIDs of migrations whose run ended with a final
	// outcome (Succeeded or Failed) that the cache may not show yet.
	Ended map[types.UID]bool
	// MaxParallel bounds how many migrations run at once.
	MaxParallel int
	// Now is the current time.
	Now time.Time
}

// ScheduleDecision is what to do.
type ScheduleDecision struct {
	// Start names the migrations to start, in order.
	Start []string
	// Stop names running migrations that must stop: deleted, finished,
	// or held (Yield).
	Stop []string
	// Yield names the running migrations among Stop that stop because an
	// in-tree migration of their resource is Running, with its name.
	Yield map[string]string
	// Held names the migrations that would start but wait for a Running
	// in-tree migration of their resource, with its name.
	Held map[string]string
	// RequeueAfter, when not zero, is when a waiting migration's backoff ends.
	RequeueAfter time.Duration
}

// Schedule decides which migrations run. Running migrations resume first
// (they hold partial progress), then those for a storage change (a
// first-sight rewrite, which svm's trigger marks, must never hold one up:
// it only makes sure, and with more than one slot it leaves one free for
// them), each kind oldest first; a resource is never
// migrated by two migrations at once, nor while kube-controller-manager
// runs an in-tree migration of it that is not one of svm's: a migration
// held by one waits, and a running one stops (to resume when it ends).
func Schedule(in ScheduleInput) ScheduleDecision {
	var d ScheduleDecision
	holder := func(m *migrationv1alpha1.StorageVersionMigration) *storagemigrationv1.StorageVersionMigration {
		gr := schema.GroupResource{Group: m.Spec.Resource.Group, Resource: m.Spec.Resource.Resource}
		return intree.Holder(in.InTree, gr, string(m.UID))
	}
	live := map[string]bool{}
	busy := map[string]bool{} // resources with a running migration
	for i := range in.Migrations {
		m := &in.Migrations[i]
		if m.DeletionTimestamp == nil && !m.IsFinished() && !in.Ended[m.UID] {
			live[m.Name] = true
			if in.Running[m.Name] {
				busy[resourceKey(m)] = true
			}
		}
	}
	for name := range in.Running {
		if !live[name] {
			d.Stop = append(d.Stop, name)
		}
	}
	for i := range in.Migrations {
		m := &in.Migrations[i]
		if !live[m.Name] || !in.Running[m.Name] {
			continue
		}
		if h := holder(m); h != nil {
			d.Stop = append(d.Stop, m.Name)
			d.Yield = setName(d.Yield, m.Name, h.Name)
			delete(busy, resourceKey(m))
		}
	}
	slices.Sort(d.Stop)

	candidates := make([]*migrationv1alpha1.StorageVersionMigration, 0, len(in.Migrations))
	for i := range in.Migrations {
		m := &in.Migrations[i]
		if live[m.Name] && !in.Running[m.Name] {
			candidates = append(candidates, m)
		}
	}
	slices.SortFunc(candidates, func(a, b *migrationv1alpha1.StorageVersionMigration) int {
		if ra, rb := a.HasCondition(migrationv1alpha1.MigrationRunning), b.HasCondition(migrationv1alpha1.MigrationRunning); ra != rb {
			if ra {
				return -1
			}
			return 1
		}
		if fa, fb := firstSight(a), firstSight(b); fa != fb {
			if fb {
				return -1
			}
			return 1
		}
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})

	slots := in.MaxParallel - (len(in.Running) - len(d.Stop))
	// With more than one slot, first-sight rewrites leave one free, so
	// that a storage change starts at once rather than after one of them.
	firstSightSlots := max(in.MaxParallel-1, 1)
	stopping := map[string]bool{}
	for _, name := range d.Stop {
		stopping[name] = true
	}
	firstSightRunning := 0
	for i := range in.Migrations {
		m := &in.Migrations[i]
		if in.Running[m.Name] && !stopping[m.Name] && firstSight(m) {
			firstSightRunning++
		}
	}
	for _, m := range candidates {
		if slots <= 0 {
			break
		}
		if busy[resourceKey(m)] || firstSight(m) && firstSightRunning >= firstSightSlots {
			continue
		}
		if h := holder(m); h != nil {
			d.Held = setName(d.Held, m.Name, h.Name)
			continue
		}
		if t, ok := in.NotBefore[m.Name]; ok && in.Now.Before(t) {
			if wait := t.Sub(in.Now); d.RequeueAfter == 0 || wait < d.RequeueAfter {
				d.RequeueAfter = wait
			}
			continue
		}
		d.Start = append(d.Start, m.Name)
		busy[resourceKey(m)] = true
		slots--
		if firstSight(m) {
			firstSightRunning++
		}
	}
	return d
}

func setName(m map[string]string, k, v string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[k] = v
	return m
}

// firstSight reports whether the trigger made m to make sure of what is
// stored, with no change known.
func firstSight(m *migrationv1alpha1.StorageVersionMigration) bool {
	return trigger.IsOwned(m) && m.Annotations[trigger.ReasonAnnotation] == trigger.ReasonFirstSight
}

func resourceKey(m *migrationv1alpha1.StorageVersionMigration) string {
	return m.Spec.Resource.Resource + "." + m.Spec.Resource.Group
}
