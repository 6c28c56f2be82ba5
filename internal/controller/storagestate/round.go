package storagestate

import (
	"context"
	"time"

	"golang.org/x/sync/errgroup"
	apiserverinternalv1alpha1 "k8s.io/api/apiserverinternal/v1alpha1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/controller/round"
	"github.com/svm-project/svm/internal/followup"
	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/internal/trigger"
)

// round decides for every resource and applies the decisions: with
// discover, from what discovery says now; without, from what the cluster
// records (a migration ended, a retry fell due, a StorageVersion changed).
// Only with heartbeat (the periodic rounds) does what it observes renew
// the StorageStates' heartbeats. It returns the delay until the earliest
// retry falls due, 0 for none.
func (c *Controller) round(ctx context.Context, discover, heartbeat bool) time.Duration {
	log := klog.FromContext(ctx)
	var seen observation
	if discover {
		var err error
		if seen, err = c.observe(ctx); err != nil {
			log.Error(err, "Discovery failed; nothing is concluded this round")
			return 0
		}
	}
	read := c.Clock.Now()
	snap, err := c.readCluster(ctx)
	if err != nil {
		log.Error(err, "Reading the cluster failed; nothing is concluded this round")
		return 0
	}
	cost := c.Clock.Since(read)
	if discover {
		// Between discovery rounds, the servers are taken to say what
		// they said at the last.
		c.servers = c.lookAtServers(ctx, snap)
	}
	if c.MigrateUnhashed {
		c.migrateOnce(ctx, seen.unhashed, snap.all)
	}
	decided := c.Clock.Now()
	var choices []choice
	for gr, hash := range seen.withStates(snap.states) {
		choices = append(choices, c.choose(gr, hash, snap, heartbeat))
	}
	// What every round pays, whatever it finds to do, spaces the rounds:
	// reading the cluster and deciding. Not discovery, nor every server's
	// (their requests are throttled by their client, and only some rounds
	// run them), nor applying, the work rounds are for.
	now := c.Clock.Now()
	c.spacing.Ended(now.Add(-cost-now.Sub(decided)), now)
	c.applyAll(ctx, choices)
	var next time.Duration
	behind := false
	for i := range choices {
		next = sooner(next, c.settle(ctx, &choices[i]))
		behind = behind || choices[i].serversBehind
	}
	if behind {
		// Only discovery tells when every server has taken up a CRD's
		// change: look again soon, not at the next Interval.
		c.rediscover.Store(true)
		next = sooner(next, lookAgain)
	}
	return next
}

// lookAgain is how soon the trigger reads every API server's discovery
// again while one has not taken up a CRD's storage version.
const lookAgain = 5 * time.Second

// observation is what one discovery found: the storage version hash of
// every resource that reports one, and the resources that report none.
type observation struct {
	hashes   map[schema.GroupResource]*string
	unhashed []schema.GroupResource
}

// withStates is every resource to decide for: those discovered, with their
// hash, and those with a StorageState that discovery did not answer for
// this round (or that no discovery ran for), with nil.
func (o observation) withStates(states map[schema.GroupResource]*migrationv1alpha1.StorageState) map[schema.GroupResource]*string {
	all := make(map[schema.GroupResource]*string, len(o.hashes)+len(states))
	for gr := range states {
		all[gr] = nil
	}
	for gr, hash := range o.hashes {
		all[gr] = hash
	}
	return all
}

// observe runs discovery. It remembers each resource's version and kind:
// migrations are made in that version, and StorageVersion objects are
// read by kind, in later rounds too.
func (c *Controller) observe(ctx context.Context) (observation, error) {
	found, err := resources.Discover(c.Discovery)
	if err != nil {
		c.Metrics.DiscoveryPolled(err, 0)
		return observation{}, err
	}
	c.Metrics.DiscoveryPolled(nil, len(found.FailedGroups))
	if len(found.FailedGroups) > 0 {
		klog.FromContext(ctx).Info("Discovery failed for some groups; their resources keep their state this round", "groups", len(found.FailedGroups))
	}
	seen := observation{hashes: map[schema.GroupResource]*string{}}
	for _, r := range found.Resources {
		gr := r.GroupResource()
		c.versions[gr] = r.Version
		c.kinds[gr] = r.Kind
		if r.StorageVersionHash == "" {
			seen.unhashed = append(seen.unhashed, gr)
			continue
		}
		hash := r.StorageVersionHash
		seen.hashes[gr] = &hash
	}
	return seen, nil
}

// snapshot is the cluster as one round reads it, by resource.
type snapshot struct {
	states     map[schema.GroupResource]*migrationv1alpha1.StorageState
	migrations map[schema.GroupResource][]migrationv1alpha1.StorageVersionMigration
	crds       map[schema.GroupResource]*apiextensionsv1.CustomResourceDefinition
	// all holds every migration.
	all []migrationv1alpha1.StorageVersionMigration
}

// readCluster reads StorageStates, migrations and CRDs straight from the
// API server.
func (c *Controller) readCluster(ctx context.Context) (*snapshot, error) {
	objs, err := round.ReadObjects(ctx, c.Reader)
	if err != nil {
		return nil, err
	}
	crds, err := round.ReadCRDs(ctx, c.Reader)
	if err != nil {
		return nil, err
	}
	snap := &snapshot{
		states:     map[schema.GroupResource]*migrationv1alpha1.StorageState{},
		migrations: map[schema.GroupResource][]migrationv1alpha1.StorageVersionMigration{},
		crds:       map[schema.GroupResource]*apiextensionsv1.CustomResourceDefinition{},
		all:        groupedByResource(objs.Migrations),
	}
	for i := range objs.States {
		r := objs.States[i].Spec.Resource
		snap.states[schema.GroupResource{Group: r.Group, Resource: r.Resource}] = &objs.States[i]
	}
	// Each resource's migrations are a window of all, in the order listed,
	// not a copy of their own: a round holds every migration of the
	// cluster once (a copy per resource was as large again, 2,000
	// migrations in the round after a flip of 1,000 CRDs). all is the
	// list regrouped by resource in one pass (a sort moved each migration
	// a dozen times, every round). A window's capacity ends at its
	// length, so that an append to one resource's never writes over the
	// next one's.
	for start := 0; start < len(snap.all); {
		gr := snap.all[start].Spec.Resource.GroupResource()
		end := start + 1
		for end < len(snap.all) && snap.all[end].Spec.Resource.GroupResource() == gr {
			end++
		}
		snap.migrations[gr] = snap.all[start:end:end]
		start = end
	}
	for i := range crds {
		crd := &crds[i]
		snap.crds[schema.GroupResource{Group: crd.Spec.Group, Resource: crd.Spec.Names.Plural}] = crd
	}
	return snap, nil
}

// groupedByResource is migrations with each resource's together, in the
// order of their resources' first migrations, each resource's in the
// order listed.
func groupedByResource(migrations []migrationv1alpha1.StorageVersionMigration) []migrationv1alpha1.StorageVersionMigration {
	var order []schema.GroupResource
	counts := map[schema.GroupResource]int{}
	for i := range migrations {
		gr := migrations[i].Spec.Resource.GroupResource()
		if counts[gr] == 0 {
			order = append(order, gr)
		}
		counts[gr]++
	}
	next := make(map[schema.GroupResource]int, len(order))
	offset := 0
	for _, gr := range order {
		next[gr] = offset
		offset += counts[gr]
	}
	out := make([]migrationv1alpha1.StorageVersionMigration, len(migrations))
	for i := range migrations {
		gr := migrations[i].Spec.Resource.GroupResource()
		out[next[gr]] = migrations[i]
		next[gr]++
	}
	return out
}

// choice is one resource's decision in a round, and what applying it
// came to.
type choice struct {
	gr         schema.GroupResource
	now        time.Time
	state      *migrationv1alpha1.StorageState
	crd        *apiextensionsv1.CustomResourceDefinition
	migrations []migrationv1alpha1.StorageVersionMigration
	decision   trigger.Decision
	// serversBehind: an API server has not taken up the CRD's storage
	// version.
	serversBehind bool
	// requeue and err are what applying the decision returned.
	requeue time.Duration
	err     error
}

// choose decides for one resource, given its discovered hash (nil when
// unknown this round), renewing its heartbeat with heartbeat.
func (c *Controller) choose(gr schema.GroupResource, observed *string, snap *snapshot, heartbeat bool) choice {
	now := c.Clock.Now()
	state, crd, migrations := snap.states[gr], snap.crds[gr], snap.migrations[gr]
	sv := c.storageVersion(gr)
	in := trigger.Input{
		Now: now, Observed: observed, State: state, Migrations: migrations,
		RetryBase: c.RetryBase, RetryMax: c.RetryMax, CRD: crdStorage(crd),
		Encoding: c.encoding(gr, sv), Fingerprint: c.fingerprint(state, migrations, crd, sv),
		SettleDelay: c.SettleDelay, DrainMargin: c.DrainMargin, SkipHeartbeat: !heartbeat,
	}
	switch {
	case in.CRD != nil:
		in.CRD.SeenAt = c.seen.of(crd)
		in.ServersBehind = c.servers.behind(gr, in.CRD.StorageHash)
	case in.Encoding == nil:
		in.Encoding = c.servers.encoding(gr)
	}
	return choice{
		gr: gr, now: now, state: state, crd: crd, migrations: migrations,
		decision: trigger.Decide(in), serversBehind: in.ServersBehind != "",
	}
}

// applyWorkers is how many resources' decisions a round applies at once.
// Each takes a few requests in a row (a list of one object, a status
// write, a create); one after another, a bulk flip of a thousand CRDs
// took minutes to apply, the API server mostly waiting for svm.
const applyWorkers = 8

// applyAll applies the decisions, applyWorkers resources at once: each
// resource's writes are its own (its StorageState, its migrations, its
// CRD's status) and keep their order; apply touches nothing of the
// Controller's but through the clients, the recorder and the metrics,
// which are safe for concurrent use.
func (c *Controller) applyAll(ctx context.Context, choices []choice) {
	var g errgroup.Group
	g.SetLimit(applyWorkers)
	for i := range choices {
		ch := &choices[i]
		g.Go(func() error {
			ch.requeue, ch.err = c.apply(ctx, ch.gr, ch.state, ch.crd, ch.migrations, ch.decision)
			return nil
		})
	}
	_ = g.Wait()
}

// settle does what follows a resource's applied decision, one resource at
// a time, and returns when to decide for it again: 0 when only a change
// or the next discovery calls for it.
func (c *Controller) settle(ctx context.Context, ch *choice) time.Duration {
	requeue := ch.requeue
	if ch.err != nil {
		// A write that failed (a conflict with another writer of the
		// CRD, say) is decided again soon: no change may come to ask for
		// it, and the next discovery is an interval away. A prune that
		// failed after its StorageState was written would otherwise wait
		// that long; the next round finds the CRD's storedVersions again
		// and prunes.
		c.applyFailures[ch.gr]++
		retry := followup.Backoff(applyRetry, applyRetryMax, c.applyFailures[ch.gr])
		klog.FromContext(ctx).Error(ch.err, "Apply trigger decision; deciding again soon", "resource", ch.gr, "after", retry)
		requeue = sooner(requeue, retry)
	} else {
		delete(c.applyFailures, ch.gr)
	}
	c.noteRetry(ch.gr, ch.state, ch.decision, ch.now)
	c.notePruneHeld(ch.gr, ch.state, ch.decision)
	return sooner(ch.decision.RequeueAfter, requeue)
}

// fingerprint reads the fingerprint of a resource with CRD crd and
// StorageVersion object sv (either nil when there is none), after
// teaching Epochs what svm recorded of its storage on its StorageState and
// migrations: after a restart, the CRD's epoch goes on from there.
func (c *Controller) fingerprint(state *migrationv1alpha1.StorageState, migrations []migrationv1alpha1.StorageVersionMigration,
	crd *apiextensionsv1.CustomResourceDefinition, sv *apiserverinternalv1alpha1.StorageVersion) string {
	if state != nil {
		c.Epochs.Learn(state.Status.StorageFingerprint)
	}
	for i := range migrations {
		c.Epochs.Learn(migrations[i].Status.StorageFingerprint)
	}
	return c.Epochs.Of(crd, sv).Value
}

// notePruneHeld sets the gauge of the entries holding gr's prune, as d
// leaves its StorageState: for a resource held now or before, so that
// resources never held have no series.
func (c *Controller) notePruneHeld(gr schema.GroupResource, state *migrationv1alpha1.StorageState, d trigger.Decision) {
	var before, now *migrationv1alpha1.PruneHold
	if state != nil {
		before, now = state.Status.PruneHeld, state.Status.PruneHeld
	}
	if d.Status != nil {
		now = d.Status.PruneHeld
	}
	switch {
	case now != nil:
		c.Metrics.PruneHeld(gr, now.Entries)
	case before != nil:
		c.Metrics.PruneHeld(gr, 0)
	}
}

// applyRetry is how soon a resource whose decision could not be applied
// is decided again, doubling with each failure in a row up to
// applyRetryMax: a write refused for good (RBAC taken away, say) is not
// sent again every few seconds.
const (
	applyRetry    = 5 * time.Second
	applyRetryMax = 5 * time.Minute
)

// sooner is the shorter of two delays, where 0 means none.
func sooner(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return max(b, 0)
	case b <= 0:
		return a
	}
	return min(a, b)
}

// migrateOnce creates the one-time migration of each resource without a
// storageVersionHash that has none yet.
func (c *Controller) migrateOnce(ctx context.Context, grs []schema.GroupResource, existing []migrationv1alpha1.StorageVersionMigration) {
	names := map[string]bool{}
	for _, m := range existing {
		names[m.Name] = true
	}
	for _, gr := range grs {
		r := migrationv1alpha1.GroupResource{Group: gr.Group, Resource: gr.Resource}
		name := trigger.InitialMigrationName(r)
		if names[name] {
			continue
		}
		m := &migrationv1alpha1.StorageVersionMigration{
			ObjectMeta: metav1.ObjectMeta{
				Name:   name,
				Labels: map[string]string{trigger.CreatedByLabel: trigger.InitializerValue},
			},
			Spec: migrationv1alpha1.StorageVersionMigrationSpec{
				Resource:      migrationv1alpha1.GroupVersionResource{Group: gr.Group, Version: c.versions[gr], Resource: gr.Resource},
				ThroughStatus: c.ThroughStatus,
			},
		}
		err := c.Client.Create(ctx, m, client.FieldOwner(FieldManager))
		if err != nil && !apierrors.IsAlreadyExists(err) {
			klog.FromContext(ctx).Error(err, "Create the one-time migration of a resource without a storage version hash", "resource", gr)
			continue
		}
		klog.FromContext(ctx).Info("Created the one-time migration of a resource without a storage version hash", "migration", name, "resource", gr)
	}
}
