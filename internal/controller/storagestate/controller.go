// Package storagestate is the triggering controller: it keeps a StorageState
// for every migratable resource and creates StorageVersionMigrations when a
// resource's storage version changes. It only decides (with the pure
// functions of internal/trigger) and records; the migration controller
// executes. The two talk only through API objects.
package storagestate

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	apiserverinternalv1alpha1 "k8s.io/api/apiserverinternal/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/health"
	"github.com/svm-project/svm/internal/intree"
	"github.com/svm-project/svm/internal/metrics"
	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/internal/trigger"
)

// loopName names the trigger's loop for the liveness check.
const loopName = "trigger"

// FieldManager names the triggering controller's writes.
const FieldManager = "svm-trigger"

// The triggering controller reads discovery, keeps StorageStates, and
// creates and deletes (its own) migrations. It reads StorageStates and CRDs
// with uncached lists only, and writes status with updates that carry the
// resourceVersion read, so it needs neither get, watch nor patch on them.
//
// +kubebuilder:rbac:groups=migration.k8s.io,resources=storagestates,verbs=list;create;delete
// +kubebuilder:rbac:groups=migration.k8s.io,resources=storagestates/status,verbs=update
// +kubebuilder:rbac:groups=migration.k8s.io,resources=storageversionmigrations,verbs=list;watch;create;delete
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=list
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions/status,verbs=update
// +kubebuilder:rbac:groups=internal.apiserver.k8s.io,resources=storageversions,verbs=list;watch

// Controller is the triggering controller. It runs with leadership.
type Controller struct {
	// Client writes; Reader reads straight from the API server, so that a
	// round never decides from a cache that lags its own last writes (and,
	// say, creates a second migration).
	Client client.Client
	Reader client.Reader
	// InTreeBetaServed says that the in-tree migration API is served in
	// v1beta1 only (Kubernetes 1.35 and 1.36): pruning waits for its
	// Running migrations too.
	InTreeBetaServed bool
	Discovery        discovery.DiscoveryInterface
	Clock            clock.Clock
	// Interval between discovery rounds. Default 10 minutes.
	Interval time.Duration
	// StaleAfter: a StorageState whose heartbeat is older when svm starts
	// is reset. Default 10 minutes.
	StaleAfter time.Duration
	// RetryBase and RetryMax bound the delay before a failed migration is
	// followed by a new one. Defaults 1 minute and 1 hour.
	RetryBase, RetryMax time.Duration
	// PruneStoredVersions cuts a CRD's status.storedVersions to its storage
	// version once a migration made at the CRD's current generation has
	// succeeded, so that old versions can be removed from the CRD.
	PruneStoredVersions bool
	// MigrateUnhashed migrates once each resource whose discovery reports
	// no storageVersionHash (some aggregated APIs): the trigger cannot watch
	// such a resource, but its objects may still be stored in an old form.
	MigrateUnhashed bool
	// Recorder, if set, records an event for every change of a
	// StorageState and every migration the trigger creates or stops.
	Recorder events.EventRecorder
	// Metrics, if set, counts discovery rounds and StorageState changes.
	Metrics *metrics.Metrics
	// Health, if set, is told after every round that the loop is alive, so
	// that a stuck loop fails the liveness probe.
	Health *health.Tracker
	// StorageVersions, if set, reads the StorageVersion API where the
	// cluster serves it: the trigger then watches StorageVersion objects,
	// decides on every change, and trusts their common encoding version
	// over discovery (one API server's view).
	StorageVersions kubernetes.Interface
	// SettleDelay: a custom resource is migrated only once its current
	// storage version has been seen for this long (trigger.Input).
	SettleDelay time.Duration

	kick     chan struct{}
	versions map[schema.GroupResource]string // last discovered version of each resource
	kinds    map[schema.GroupResource]string // and its kind
	// storageVersions holds the StorageVersion objects, nil when the API
	// is not served (or not asked for).
	storageVersions toolscache.Store
	// retries holds the retry each resource was last seen waiting for,
	// so that its event is recorded once, not every round.
	retries map[schema.GroupResource]string
}

// SetupWithManager adds the controller to mgr.
func (c *Controller) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	c.Interval = cmpOr(c.Interval, 10*time.Minute)
	c.StaleAfter = cmpOr(c.StaleAfter, 10*time.Minute)
	c.RetryBase = cmpOr(c.RetryBase, time.Minute)
	c.RetryMax = cmpOr(c.RetryMax, time.Hour)
	c.kick = make(chan struct{}, 1)
	c.versions = map[schema.GroupResource]string{}
	c.kinds = map[schema.GroupResource]string{}
	c.retries = map[schema.GroupResource]string{}
	informer, err := mgr.GetCache().GetInformer(ctx, &migrationv1alpha1.StorageVersionMigration{})
	if err != nil {
		return err
	}
	// Any change to a migration may refine a StorageState or call for a
	// retry: re-decide, without a discovery round.
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.poke() },
		UpdateFunc: func(any, any) { c.poke() },
		DeleteFunc: func(any) { c.poke() },
	})
	if err != nil {
		return err
	}
	return mgr.Add(c)
}

func cmpOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

func (c *Controller) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (c *Controller) NeedLeaderElection() bool { return true }

// Start resets stale StorageStates, then runs discovery rounds every
// Interval and re-decides whenever a migration changes.
func (c *Controller) Start(ctx context.Context) error {
	log := klog.FromContext(ctx).WithName("trigger")
	ctx = klog.NewContext(ctx, log)
	// A healthy loop finishes a discovery round every Interval, and
	// rounds on changes in between.
	c.Health.Start(loopName, health.StallAfter(c.Interval))
	defer c.Health.Stop(loopName)
	if err := c.resetStale(ctx); err != nil {
		return err
	}
	if err := c.watchStorageVersions(ctx); err != nil {
		return err
	}
	discoverAt := c.Clock.Now()
	var retry <-chan time.Time
	for {
		c.Health.Beat(loopName)
		wait := max(discoverAt.Sub(c.Clock.Now()), 0)
		select {
		case <-ctx.Done():
			return nil
		case <-c.Clock.After(wait):
			discoverAt = c.Clock.Now().Add(c.Interval)
			retry = c.after(c.round(ctx, true))
		case <-c.kick:
			// Migrations change after every chunk; gather a burst of
			// changes into one round.
			select {
			case <-ctx.Done():
				return nil
			case <-c.Clock.After(time.Second):
			}
			retry = c.after(c.round(ctx, false))
		case <-retry:
			retry = c.after(c.round(ctx, false))
		}
	}
}

func (c *Controller) after(d time.Duration) <-chan time.Time {
	if d <= 0 {
		return nil
	}
	return c.Clock.After(d)
}

// watchStorageVersions starts watching StorageVersion objects if the
// cluster serves them, and waits until they are all read. Every change
// calls for a round: a change of encoding version is seen at once, not at
// the next discovery round, so none is missed between two.
func (c *Controller) watchStorageVersions(ctx context.Context) error {
	log := klog.FromContext(ctx)
	if c.StorageVersions == nil {
		return nil
	}
	gv := apiserverinternalv1alpha1.SchemeGroupVersion.String()
	list, err := c.Discovery.ServerResourcesForGroupVersion(gv)
	switch {
	case apierrors.IsNotFound(err):
		log.Info("The StorageVersion API is not served; storage versions come from discovery alone", "groupVersion", gv)
		return nil
	case err != nil:
		return fmt.Errorf("discover %s: %w", gv, err)
	case !slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "storageversions" }):
		log.Info("The StorageVersion API is not served; storage versions come from discovery alone", "groupVersion", gv)
		return nil
	}
	client := c.StorageVersions.InternalV1alpha1().StorageVersions()
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return client.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return client.Watch(ctx, opts)
		},
	}
	informer := toolscache.NewSharedIndexInformer(lw, &apiserverinternalv1alpha1.StorageVersion{}, 0, toolscache.Indexers{})
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.poke() },
		UpdateFunc: func(any, any) { c.poke() },
		DeleteFunc: func(any) { c.poke() },
	}); err != nil {
		return err
	}
	go informer.RunWithContext(ctx)
	if !toolscache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return ctx.Err()
	}
	c.storageVersions = informer.GetStore()
	log.Info("Watching the StorageVersion API: its common encoding versions prevail over discovery, and migrations wait while API servers disagree")
	return nil
}

// encoding is what the StorageVersion API says about gr, nil when it says
// nothing (not served, no object for gr, or gr not yet discovered).
func (c *Controller) encoding(gr schema.GroupResource) *trigger.Encoding {
	kind, ok := c.kinds[gr]
	if c.storageVersions == nil || !ok {
		return nil
	}
	obj, exists, err := c.storageVersions.GetByKey(trigger.StorageVersionName(gr))
	if err != nil || !exists {
		return nil
	}
	sv, _ := obj.(*apiserverinternalv1alpha1.StorageVersion)
	return trigger.EncodingOf(sv, kind)
}

// resetStale re-creates every StorageState whose heartbeat is older than
// StaleAfter with persisted hashes ["Unknown"]: svm may have missed storage
// changes while it was down.
func (c *Controller) resetStale(ctx context.Context) error {
	var states migrationv1alpha1.StorageStateList
	if err := c.Reader.List(ctx, &states); err != nil {
		return fmt.Errorf("list storage states: %w", err)
	}
	now := c.Clock.Now()
	for i := range states.Items {
		s := &states.Items[i]
		if !trigger.IsStale(s, now, c.StaleAfter) {
			continue
		}
		klog.FromContext(ctx).Info("Resetting stale storage state", "storageState", klog.KObj(s), "lastHeartbeat", s.Status.LastHeartbeatTime)
		if err := c.Client.Delete(ctx, s, client.Preconditions{UID: &s.UID, ResourceVersion: &s.ResourceVersion}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("reset storage state %s: %w", s.Name, err)
		}
		created, err := c.createState(ctx, s.Spec.Resource, trigger.ResetStatus(s, now))
		if err != nil {
			return err
		}
		gr := schema.GroupResource{Group: s.Spec.Resource.Group, Resource: s.Spec.Resource.Resource}
		c.record(gr, created, nil, resetTransition(s.Status.LastHeartbeatTime.Time, c.StaleAfter))
	}
	return nil
}

// round decides for every resource and applies the decisions. It returns
// the delay until the earliest retry falls due.
func (c *Controller) round(ctx context.Context, discover bool) time.Duration {
	log := klog.FromContext(ctx)
	observed := map[schema.GroupResource]*string{}
	var unhashed []schema.GroupResource
	if discover {
		found, err := resources.Discover(c.Discovery)
		if err != nil {
			c.Metrics.DiscoveryPolled(err, 0)
			log.Error(err, "Discovery failed; nothing is concluded this round")
			return 0
		}
		c.Metrics.DiscoveryPolled(nil, len(found.FailedGroups))
		for _, r := range found.Resources {
			c.versions[r.GroupResource()] = r.Version
			c.kinds[r.GroupResource()] = r.Kind
			if r.StorageVersionHash == "" {
				unhashed = append(unhashed, r.GroupResource())
				continue
			}
			hash := r.StorageVersionHash
			observed[r.GroupResource()] = &hash
		}
		if len(found.FailedGroups) > 0 {
			log.Info("Discovery failed for some groups; their resources keep their state this round", "groups", len(found.FailedGroups))
		}
	}
	var states migrationv1alpha1.StorageStateList
	var migrations migrationv1alpha1.StorageVersionMigrationList
	if err := c.Reader.List(ctx, &states); err != nil {
		log.Error(err, "List storage states")
		return 0
	}
	if err := c.Reader.List(ctx, &migrations); err != nil {
		log.Error(err, "List migrations")
		return 0
	}
	var crds apiextensionsv1.CustomResourceDefinitionList
	if err := c.Reader.List(ctx, &crds); err != nil {
		log.Error(err, "List CustomResourceDefinitions")
		return 0
	}
	crdOf := map[schema.GroupResource]*apiextensionsv1.CustomResourceDefinition{}
	for i := range crds.Items {
		crd := &crds.Items[i]
		crdOf[schema.GroupResource{Group: crd.Spec.Group, Resource: crd.Spec.Names.Plural}] = crd
	}
	stateOf := map[schema.GroupResource]*migrationv1alpha1.StorageState{}
	for i := range states.Items {
		r := states.Items[i].Spec.Resource
		stateOf[schema.GroupResource{Group: r.Group, Resource: r.Resource}] = &states.Items[i]
	}
	migrationsOf := map[schema.GroupResource][]migrationv1alpha1.StorageVersionMigration{}
	for _, m := range migrations.Items {
		gr := schema.GroupResource{Group: m.Spec.Resource.Group, Resource: m.Spec.Resource.Resource}
		migrationsOf[gr] = append(migrationsOf[gr], m)
	}

	if c.MigrateUnhashed {
		c.migrateOnce(ctx, unhashed, migrations.Items)
	}

	var next time.Duration
	all := maps.Clone(observed)
	for gr := range stateOf {
		if _, ok := all[gr]; !ok {
			all[gr] = nil
		}
	}
	for gr, hash := range all {
		now := c.Clock.Now()
		d := trigger.Decide(trigger.Input{
			Now: now, Observed: hash, State: stateOf[gr], Migrations: migrationsOf[gr],
			RetryBase: c.RetryBase, RetryMax: c.RetryMax, CRD: crdStorage(crdOf[gr]),
			Encoding: c.encoding(gr), SettleDelay: c.SettleDelay,
		})
		requeue, err := c.apply(ctx, gr, stateOf[gr], crdOf[gr], migrationsOf[gr], d)
		if err != nil {
			log.Error(err, "Apply trigger decision", "resource", gr)
		}
		c.noteRetry(gr, stateOf[gr], d, now)
		for _, after := range []time.Duration{d.RequeueAfter, requeue} {
			if after > 0 && (next == 0 || after < next) {
				next = after
			}
		}
	}
	return next
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
				Resource: migrationv1alpha1.GroupVersionResource{Group: gr.Group, Version: c.versions[gr], Resource: gr.Resource},
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

// apply carries out a decision: stop svm's stale migrations, write the
// state, then create the migration.
//
// It returns when to decide again for a step that had to wait: pruning
// while an in-tree migration of the resource is Running, which
// kube-controller-manager prunes for itself when it ends.
func (c *Controller) apply(ctx context.Context, gr schema.GroupResource, state *migrationv1alpha1.StorageState, crd *apiextensionsv1.CustomResourceDefinition,
	migrations []migrationv1alpha1.StorageVersionMigration, d trigger.Decision) (time.Duration, error) {
	log := klog.FromContext(ctx).WithValues("resource", gr)
	for _, name := range d.DeleteMigrations {
		m := &migrationv1alpha1.StorageVersionMigration{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if i := slices.IndexFunc(migrations, func(m migrationv1alpha1.StorageVersionMigration) bool { return m.Name == name }); i >= 0 {
			m = &migrations[i]
		}
		if err := c.Client.Delete(ctx, m); err != nil && !apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("stop migration %s: %w", name, err)
		}
		c.event(m, nil, corev1.EventTypeNormal, ReasonSuperseded, "Delete", supersededNote(d))
		log.Info("Stopped migration for a previous storage version", "migration", name)
	}
	switch {
	case d.CreateState:
		created, err := c.createState(ctx, migrationv1alpha1.GroupResource{Group: gr.Group, Resource: gr.Resource}, d.Status)
		if err != nil {
			return 0, err
		}
		state = created
		c.record(gr, state, nil, createdTransition(d.Status))
	case d.Status != nil:
		updated := state.DeepCopy()
		updated.Status = *d.Status
		// Update carries the resourceVersion read: a concurrent change
		// makes this round's decision moot, and the next round re-decides.
		if err := c.Client.Status().Update(ctx, updated, client.FieldOwner(FieldManager)); err != nil {
			return 0, fmt.Errorf("update storage state: %w", err)
		}
		for _, t := range statusTransitions(&state.Status, d.Status) {
			c.record(gr, updated, nil, t)
		}
		state = updated
	}
	var requeue time.Duration
	if d.PruneStoredVersions && c.PruneStoredVersions {
		holder, err := c.inTreeHolder(ctx, gr)
		switch {
		case err != nil:
			return 0, err
		case holder != "":
			// Both would prune: wait, and see what is left after it.
			klog.FromContext(ctx).Info("Not pruning storedVersions while an in-tree migration of the resource is running", "crd", klog.KObj(crd), "inTreeMigration", holder)
			requeue = pruneWait
		default:
			if err := c.pruneStoredVersions(ctx, gr, state, crd); err != nil {
				return 0, err
			}
		}
	}
	if d.CreateMigrationFor != nil {
		return requeue, c.createMigration(ctx, gr, state, *d.CreateMigrationFor, d.Reason, crd)
	}
	return requeue, nil
}

// pruneWait is how soon pruning is decided again after an in-tree
// migration of the resource held it back.
const pruneWait = 15 * time.Second

// inTreeHolder names the in-tree migration of gr that is Running, "" when
// none is or the in-tree API is not served.
func (c *Controller) inTreeHolder(ctx context.Context, gr schema.GroupResource) (string, error) {
	migrations, err := intree.List(ctx, c.Reader, true, c.InTreeBetaServed)
	if err != nil {
		return "", err
	}
	if h := intree.Holder(migrations, gr, ""); h != nil {
		return h.Name, nil
	}
	return "", nil
}

func supersededNote(d trigger.Decision) string {
	if d.Status != nil && d.Status.CurrentStorageVersionHash == migrationv1alpha1.UnknownStorageVersionHash {
		return "Stopped by the trigger: API servers disagree on the storage version; a new migration starts when they agree"
	}
	if d.CreateMigrationFor != nil {
		return "Stopped by the trigger: superseded by a migration to storage version hash " + *d.CreateMigrationFor
	}
	return "Stopped by the trigger: superseded by a newer storage version"
}

// noteRetry records an event the first time a resource is seen waiting
// for a retry after its migrations failed.
func (c *Controller) noteRetry(gr schema.GroupResource, state *migrationv1alpha1.StorageState, d trigger.Decision, now time.Time) {
	if d.RequeueAfter <= 0 || state == nil {
		delete(c.retries, gr)
		return
	}
	due := now.Add(d.RequeueAfter)
	key := retryKey(state.Status.CurrentStorageVersionHash, due)
	if c.retries[gr] == key {
		return
	}
	c.retries[gr] = key
	c.event(state, nil, corev1.EventTypeWarning, ReasonRetryScheduled, "ScheduleRetry",
		fmt.Sprintf("The last migration to storage version hash %s failed; a new one starts in %s (at %s)",
			state.Status.CurrentStorageVersionHash, d.RequeueAfter.Round(time.Second), due.UTC().Format(time.RFC3339)))
}

// crdStorage is what a CRD says about the versions its objects are stored in.
func crdStorage(crd *apiextensionsv1.CustomResourceDefinition) *trigger.CRDStorage {
	if crd == nil {
		return nil
	}
	out := &trigger.CRDStorage{Generation: crd.Generation}
	storage := storageVersion(crd)
	for _, v := range crd.Status.StoredVersions {
		if v != storage {
			out.StoredHashes = append(out.StoredHashes, resources.StorageVersionHash(crd.Spec.Group, v, crd.Spec.Names.Kind))
		}
	}
	return out
}

func storageVersion(crd *apiextensionsv1.CustomResourceDefinition) string {
	for _, v := range crd.Spec.Versions {
		if v.Storage {
			return v.Name
		}
	}
	return ""
}

// pruneStoredVersions cuts status.storedVersions to the storage version.
// The update carries the resourceVersion read with the decision, so a CRD
// changed since (its storage version, say) is left alone: the next round
// decides again.
func (c *Controller) pruneStoredVersions(ctx context.Context, gr schema.GroupResource, state *migrationv1alpha1.StorageState, crd *apiextensionsv1.CustomResourceDefinition) error {
	pruned := crd.DeepCopy()
	pruned.Status.StoredVersions = []string{storageVersion(crd)}
	if err := c.Client.Status().Update(ctx, pruned, client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("prune storedVersions of %s: %w", crd.Name, err)
	}
	c.record(gr, state, pruned, prunedTransition(crd.Name, crd.Status.StoredVersions, pruned.Status.StoredVersions))
	klog.FromContext(ctx).Info("Pruned storedVersions", "crd", klog.KObj(crd), "from", crd.Status.StoredVersions, "to", pruned.Status.StoredVersions)
	return nil
}

func (c *Controller) createState(ctx context.Context, r migrationv1alpha1.GroupResource, status *migrationv1alpha1.StorageStateStatus) (*migrationv1alpha1.StorageState, error) {
	s := &migrationv1alpha1.StorageState{
		ObjectMeta: metav1.ObjectMeta{Name: migrationv1alpha1.StorageStateName(r)},
		Spec:       migrationv1alpha1.StorageStateSpec{Resource: r},
	}
	if err := c.Client.Create(ctx, s, client.FieldOwner(FieldManager)); err != nil {
		return nil, fmt.Errorf("create storage state %s: %w", s.Name, err)
	}
	// Status is a subresource: it is written separately.
	s.Status = *status
	if err := c.Client.Status().Update(ctx, s, client.FieldOwner(FieldManager)); err != nil {
		return nil, fmt.Errorf("set status of storage state %s: %w", s.Name, err)
	}
	klog.FromContext(ctx).Info("Created storage state", "storageState", klog.KObj(s), "current", status.CurrentStorageVersionHash)
	return s, nil
}

func (c *Controller) createMigration(ctx context.Context, gr schema.GroupResource, state *migrationv1alpha1.StorageState, hash, reason string, crd *apiextensionsv1.CustomResourceDefinition) error {
	version, ok := c.versions[gr]
	if !ok {
		return nil // not discovered since start; the next round creates it
	}
	m := &migrationv1alpha1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: migrationv1alpha1.StorageStateName(migrationv1alpha1.GroupResource{Group: gr.Group, Resource: gr.Resource}) + "-",
			Labels:       map[string]string{trigger.CreatedByLabel: trigger.CreatedByValue},
			Annotations:  map[string]string{trigger.TargetHashAnnotation: hash, trigger.ReasonAnnotation: reason},
		},
		Spec: migrationv1alpha1.StorageVersionMigrationSpec{
			Resource: migrationv1alpha1.GroupVersionResource{Group: gr.Group, Version: version, Resource: gr.Resource},
		},
	}
	if crd != nil {
		m.Annotations[trigger.CRDGenerationAnnotation] = strconv.FormatInt(crd.Generation, 10)
	}
	if err := c.Client.Create(ctx, m, client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("create migration: %w", err)
	}
	if state != nil {
		c.event(state, m, corev1.EventTypeNormal, ReasonMigrationCreated, "CreateMigration", fmt.Sprintf("Created migration %s to storage version hash %s", m.Name, hash))
	}
	klog.FromContext(ctx).Info("Created migration", "migration", klog.KObj(m), "resource", gr, "storageVersionHash", hash, "reason", reason)
	return nil
}
