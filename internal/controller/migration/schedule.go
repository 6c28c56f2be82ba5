package migration

import (
	"slices"
	"strings"
	"time"

	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	"k8s.io/apimachinery/pkg/types"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/followup"
	"github.com/svm-project/svm/internal/intree"
)

// ScheduleInput is everything Schedule decides from.
type ScheduleInput struct {
	// Migrations are all StorageVersionMigrations, as cached: the
	// cache's own objects, which Schedule only reads.
	Migrations []migrationv1alpha1.StorageVersionMigration
	// InTree are the in-tree storagemigration.k8s.io migrations, as
	// cached (the cache's own, read only); none where that API is not
	// served.
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
	s := &scheduler{in: in}
	s.findLive()
	s.stopRunning()
	s.startWaiting(s.candidates())
	return s.d
}

// scheduler is the state of one Schedule call.
type scheduler struct {
	in ScheduleInput
	d  ScheduleDecision
	// live names the migrations that may run: neither deleted nor
	// finished, as far as anyone knows.
	live map[string]bool
	// busy holds the resources (resourceKey) a running migration rewrites.
	busy map[string]bool
}

// holder is the in-tree migration that holds m's resource, nil if none.
func (s *scheduler) holder(m *migrationv1alpha1.StorageVersionMigration) *storagemigrationv1.StorageVersionMigration {
	gr := m.Spec.Resource.GroupResource()
	return intree.Holder(s.in.InTree, gr, string(m.UID))
}

func (s *scheduler) findLive() {
	s.live, s.busy = map[string]bool{}, map[string]bool{}
	for i := range s.in.Migrations {
		m := &s.in.Migrations[i]
		if m.DeletionTimestamp == nil && !m.IsFinished() && !s.in.Ended[m.UID] {
			s.live[m.Name] = true
			if s.in.Running[m.Name] {
				s.busy[resourceKey(m)] = true
			}
		}
	}
}

// stopRunning stops the runs of migrations that are no longer live, and
// those whose resource an in-tree migration now holds, freeing it.
func (s *scheduler) stopRunning() {
	for name := range s.in.Running {
		if !s.live[name] {
			s.d.Stop = append(s.d.Stop, name)
		}
	}
	for i := range s.in.Migrations {
		m := &s.in.Migrations[i]
		if !s.live[m.Name] || !s.in.Running[m.Name] {
			continue
		}
		if h := s.holder(m); h != nil {
			s.d.Stop = append(s.d.Stop, m.Name)
			s.d.Yield = setName(s.d.Yield, m.Name, h.Name)
			delete(s.busy, resourceKey(m))
		}
	}
	slices.Sort(s.d.Stop)
}

// candidates are the live migrations that do not run, in the order they
// start.
func (s *scheduler) candidates() []*migrationv1alpha1.StorageVersionMigration {
	keys := make([]startKey, 0, len(s.in.Migrations))
	for i := range s.in.Migrations {
		m := &s.in.Migrations[i]
		if s.live[m.Name] && !s.in.Running[m.Name] {
			keys = append(keys, keyOf(m))
		}
	}
	slices.SortFunc(keys, startOrder)
	candidates := make([]*migrationv1alpha1.StorageVersionMigration, len(keys))
	for i := range keys {
		candidates[i] = keys[i].m
	}
	return candidates
}

// startKey is what a migration's place in the start order depends on,
// read once: a thousand pending migrations sorted on every call would
// otherwise read each one's conditions and annotations a dozen times.
type startKey struct {
	m                    *migrationv1alpha1.StorageVersionMigration
	resuming, firstSight bool
}

func keyOf(m *migrationv1alpha1.StorageVersionMigration) startKey {
	return startKey{m: m, resuming: m.HasCondition(migrationv1alpha1.MigrationRunning), firstSight: followup.FirstSight(m)}
}

// startOrder puts Running migrations (resuming) first, then those for a
// storage change before first-sight rewrites, then the oldest.
func startOrder(a, b startKey) int {
	if a.resuming != b.resuming {
		if a.resuming {
			return -1
		}
		return 1
	}
	if a.firstSight != b.firstSight {
		if b.firstSight {
			return -1
		}
		return 1
	}
	if c := a.m.CreationTimestamp.Compare(b.m.CreationTimestamp.Time); c != 0 {
		return c
	}
	return strings.Compare(a.m.Name, b.m.Name)
}

// startWaiting starts candidates, in order, while slots are free, skipping
// those whose resource is busy or held, those backing off, and first-sight
// rewrites beyond their share.
func (s *scheduler) startWaiting(candidates []*migrationv1alpha1.StorageVersionMigration) {
	slots := s.in.MaxParallel - (len(s.in.Running) - len(s.d.Stop))
	// With more than one slot, first-sight rewrites leave one free, so
	// that a storage change starts at once rather than after one of them.
	firstSightSlots := max(s.in.MaxParallel-1, 1)
	firstSightRunning := s.firstSightRunning()
	for _, m := range candidates {
		if slots <= 0 {
			break
		}
		if s.busy[resourceKey(m)] || followup.FirstSight(m) && firstSightRunning >= firstSightSlots {
			continue
		}
		if h := s.holder(m); h != nil {
			s.d.Held = setName(s.d.Held, m.Name, h.Name)
			continue
		}
		if s.backingOff(m) {
			continue
		}
		s.d.Start = append(s.d.Start, m.Name)
		s.busy[resourceKey(m)] = true
		slots--
		if followup.FirstSight(m) {
			firstSightRunning++
		}
	}
}

// firstSightRunning counts the first-sight rewrites that keep running.
func (s *scheduler) firstSightRunning() int {
	stopping := map[string]bool{}
	for _, name := range s.d.Stop {
		stopping[name] = true
	}
	n := 0
	for i := range s.in.Migrations {
		m := &s.in.Migrations[i]
		if s.in.Running[m.Name] && !stopping[m.Name] && followup.FirstSight(m) {
			n++
		}
	}
	return n
}

// backingOff tells whether m waits for its backoff to end; if so, the
// decision asks to be woken when the soonest backoff ends.
func (s *scheduler) backingOff(m *migrationv1alpha1.StorageVersionMigration) bool {
	t, ok := s.in.NotBefore[m.Name]
	if !ok || !s.in.Now.Before(t) {
		return false
	}
	if wait := t.Sub(s.in.Now); s.d.RequeueAfter == 0 || wait < s.d.RequeueAfter {
		s.d.RequeueAfter = wait
	}
	return true
}

func setName(m map[string]string, k, v string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[k] = v
	return m
}

func resourceKey(m *migrationv1alpha1.StorageVersionMigration) string {
	return m.Spec.Resource.Resource + "." + m.Spec.Resource.Group
}
