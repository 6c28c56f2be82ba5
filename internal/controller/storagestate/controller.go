// Package storagestate is the triggering controller: it keeps a StorageState
// for every migratable resource and creates StorageVersionMigrations when a
// resource's storage version changes. It only decides (with the pure
// functions of internal/trigger) and records; the migration controller
// executes. The two talk only through API objects.
//
// It is a round controller (internal/controller/round): every Reconcile
// looks at every resource. A round discovers storage versions when the
// next discovery is due, every Interval, or when a CRD or an APIService
// came, went or changed its spec; the rounds in between, after a
// migration, a CRD or a StorageVersion changed or when a retry falls due,
// decide from what the cluster records: a custom resource's storage
// version is its CRD's, read every round.
package storagestate

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsv1client "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset/typed/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/metadata"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/controller/round"
	"github.com/svm-project/svm/internal/fingerprint"
	"github.com/svm-project/svm/internal/health"
	"github.com/svm-project/svm/internal/kubeclients"
	"github.com/svm-project/svm/internal/metrics"
	"github.com/svm-project/svm/internal/trigger"
)

// loopName names the controller, and its rounds for the liveness check.
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
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=list;watch
// +kubebuilder:rbac:groups=apiregistration.k8s.io,resources=apiservices,verbs=list;watch
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions/status,verbs=update
// +kubebuilder:rbac:groups=internal.apiserver.k8s.io,resources=storageversions,verbs=list;watch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=list,namespace=kube-system

// Controller is the triggering controller. It runs with leadership.
type Controller struct {
	// Client writes; Reader reads straight from the API server, so that a
	// round never decides from a cache that lags its own last writes (and,
	// say, creates a second migration).
	Client client.Client
	Reader client.Reader
	// Metadata reads the etcd revision of a resource (recordRevision) by
	// its version and plural, with no RESTMapper: controller-runtime's
	// learns every group it is asked about and keeps it, and a round asks
	// about every CRD's. nil: no revision is read, and migrations write
	// every object.
	Metadata metadata.Interface
	// InTreeBetaServed says that the in-tree migration API is served in
	// v1beta1 only (Kubernetes 1.35 and 1.36): pruning waits for its
	// Running migrations too.
	InTreeBetaServed bool
	Discovery        discovery.DiscoveryInterface
	// Clock is the API server's (kubeclients.Set.Clock): the trigger
	// records its time as when storage changed and compares it with the
	// migrations' creationTimestamps. Default this machine's.
	Clock clock.Clock
	// Interval between discovery rounds. Default 10 minutes.
	Interval time.Duration
	// StaleAfter: a StorageState whose heartbeat is older when svm starts
	// is reset. Default 10 minutes.
	StaleAfter time.Duration
	// RetryBase and RetryMax bound the delay before a failed migration is
	// followed by a new one. Defaults 1 minute and 1 hour.
	RetryBase, RetryMax time.Duration
	// PruneStoredVersions cuts a CRD's status.storedVersions to its storage
	// version once a migration made at the CRD's storage of now has
	// succeeded, so that old versions can be removed from the CRD.
	PruneStoredVersions bool
	// ThroughStatus sets spec.throughStatus on the migrations the trigger
	// creates: an object whose write an admission webhook or policy
	// refuses is written through its status subresource instead.
	ThroughStatus bool
	// CRDs writes the prunes (operation.PruneStoredVersions).
	CRDs apiextensionsv1client.CustomResourceDefinitionInterface
	// MigrateUnhashed migrates once each resource whose discovery reports
	// no storageVersionHash (some aggregated APIs): the trigger cannot watch
	// such a resource, but its objects may still be stored in an old form.
	MigrateUnhashed bool
	// Recorder, if set, records an event for every change of a
	// StorageState and every migration the trigger creates or stops.
	Recorder events.EventRecorder
	// Metrics, if set, counts discovery rounds and StorageState changes.
	Metrics *metrics.Metrics
	// Health, if set, is told of every round while this replica leads: a
	// leader whose rounds stop coming fails the liveness probe.
	Health *health.Tracker
	// StorageVersions, if set, reads the StorageVersion API where the
	// cluster serves it: the trigger then watches StorageVersion objects,
	// decides on every change, and trusts their common encoding version
	// over discovery (one API server's view).
	StorageVersions kubernetes.Interface
	// Leases, Servers and Endpoints, where the StorageVersion API is not
	// watched, find every API server (its identity lease) and read each
	// one's own discovery (at Endpoints, the addresses given with
	// --apiserver-endpoints, else the kubeconfig's and the ones leases
	// publish) when more than one runs: a built-in resource is migrated to
	// a version only once every server reports it. Without them, discovery
	// through the kubeconfig's address is trusted.
	Leases    coordinationv1.LeasesGetter
	Servers   *kubeclients.Endpoints
	Endpoints []string
	// Epochs is what svm has seen of each CRD's generations
	// (internal/fingerprint), shared with the migration controller's
	// guard: a spec change seen that leaves the storage version alone is
	// no storage change. nil knows only each read.
	Epochs *fingerprint.Epochs
	// SettleDelay and DrainMargin: a custom resource is migrated only
	// once its storage has been as it is now for their sum
	// (trigger.Input).
	SettleDelay, DrainMargin time.Duration

	// kicks asks for rounds on changes of StorageVersion objects, whose
	// informer is not the manager's.
	kicks round.Kicks
	// seen is when the CRD watch delivered each CRD's generation.
	seen generationsSeen
	// rediscover asks the next round to run discovery, whenever it would
	// otherwise be due: a CRD or an APIService came, went or changed.
	rediscover atomic.Bool
	// started is set once the first round has reset stale StorageStates
	// and read the StorageVersion objects.
	started bool
	// discoverAt is when the next round discovers; zero before the first.
	discoverAt time.Time
	versions   map[schema.GroupResource]string // last discovered version of each resource
	kinds      map[schema.GroupResource]string // and its kind
	// storageVersions holds the StorageVersion objects, nil when the API
	// is not served (or not asked for).
	storageVersions toolscache.Store
	// servers is what every API server's own discovery said at the last
	// discovery round; nil when svm did not ask each one (lookAtServers).
	servers *serverReads
	// retries holds the retry each resource was last seen waiting for,
	// so that its event is recorded once, not every round.
	retries map[schema.GroupResource]string
	// spacing keeps the rounds that changes ask for apart, in proportion
	// to what every round costs: reading the cluster and deciding.
	spacing round.Spacing
	// applyFailures counts the decisions in a row whose writes failed,
	// per resource: each is decided again sooner than the next
	// discovery, twice as late as the one before.
	applyFailures map[schema.GroupResource]int
}

// SetupWithManager adds the controller to mgr. It runs with leadership.
func (c *Controller) SetupWithManager(_ context.Context, mgr ctrl.Manager) error {
	c.setDefaults()
	b, err := round.NewControllerManagedBy(mgr, loopName, c.Health, c.Interval)
	if err != nil {
		return err
	}
	return b.
		// Any change to a migration may refine a StorageState or call for
		// a retry: re-decide, without discovery. Migrations change after
		// every chunk; the delay gathers a burst into one round.
		Watches(&migrationv1alpha1.StorageVersionMigration{}, round.After(time.Second)).
		WatchesMetadata(&apiextensionsv1.CustomResourceDefinition{}, c.seeingGenerations(c.onChange(crdNeedsDiscovery))).
		WatchesMetadata(&apiextensionsv1.CustomResourceDefinition{}, c.notingGenerations()).
		WatchesMetadata(apiServices(), c.onChange(func(old, new client.Object) bool { return true })).
		WatchesRawSource(&c.kicks).
		Complete(c)
}

// onChange is the event handler of the CRD and APIService watches: every
// change asks for a round a second later (a burst makes one), so that a
// CRD's storage version flip, a flip back or a new storedVersions entry is
// decided on within seconds, whatever Interval is; the trigger never waits
// for discovery to see them. A change rediscover accepts (creations and
// deletions always) asks that round to run discovery too: the resources,
// their versions and, for aggregated APIs, their hashes come from it.
func (c *Controller) onChange(rediscover func(old, new client.Object) bool) handler.EventHandler {
	kick := func(q round.Queue, discover bool) {
		if discover {
			c.rediscover.Store(true)
		}
		q.AddAfter(round.Request, time.Second)
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, _ event.CreateEvent, q round.Queue) { kick(q, true) },
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q round.Queue) {
			kick(q, rediscover(e.ObjectOld, e.ObjectNew))
		},
		DeleteFunc:  func(_ context.Context, _ event.DeleteEvent, q round.Queue) { kick(q, true) },
		GenericFunc: func(_ context.Context, _ event.GenericEvent, q round.Queue) { kick(q, false) },
	}
}

// crdNeedsDiscovery: a CRD whose spec changed (its generation) may serve
// other versions, and the version its migrations are written through
// comes from discovery. A status change (storedVersions, conditions) needs
// none: the round reads the CRD itself.
func crdNeedsDiscovery(old, new client.Object) bool {
	return old.GetGeneration() != new.GetGeneration()
}

// apiServices is the object the APIService watch is of: metadata only, so
// that svm needs no types of the aggregator's API.
func apiServices() *metav1.PartialObjectMetadata {
	o := &metav1.PartialObjectMetadata{}
	o.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIService"})
	return o
}

func (c *Controller) setDefaults() {
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	c.Interval = cmpOr(c.Interval, 10*time.Minute)
	c.StaleAfter = cmpOr(c.StaleAfter, 10*time.Minute)
	c.RetryBase = cmpOr(c.RetryBase, time.Minute)
	c.RetryMax = cmpOr(c.RetryMax, time.Hour)
}

func cmpOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Reconcile runs one round; the request does not matter. The first round
// resets stale StorageStates and starts watching StorageVersion objects.
// The next round comes when the next discovery is due, or sooner when a
// retry falls due or a watched object changes.
func (c *Controller) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	// A round that ends, even in an error, shows the loop is not stuck.
	defer c.Health.Beat(loopName)
	if !c.started {
		if err := c.start(ctx); err != nil {
			return reconcile.Result{}, err
		}
		c.started = true
	}
	if wait := c.spacing.Wait(c.Clock.Now()); wait > 0 {
		// Too soon after the last round: this one comes later, and, since
		// a round reads the whole cluster, decides whatever changed
		// meanwhile then.
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	// The periodic rounds keep their pace whatever changes ask for in
	// between, and they alone renew every StorageState's heartbeat: a
	// thousand heartbeats in each of the rounds a bulk flip asks for held
	// up the rounds that start its migrations, and a state's heartbeat is
	// never older than it would be without them.
	periodic := !c.Clock.Now().Before(c.discoverAt)
	if periodic {
		c.discoverAt = c.Clock.Now().Add(c.Interval)
	}
	discover := c.rediscover.Swap(false) || periodic
	retry := c.round(ctx, discover, periodic)
	// A round that outlasts Interval leaves discovery overdue: the next
	// comes at once (a zero RequeueAfter would mean never).
	next := max(c.discoverAt.Sub(c.Clock.Now()), time.Nanosecond)
	return reconcile.Result{RequeueAfter: sooner(next, retry)}, nil
}

// start does what comes before the first round: svm may have missed
// storage changes while it was down, and StorageVersion objects must be
// known before any decision that they may overrule.
//
// The StorageVersion informer runs until ctx ends: a round controller's
// Reconcile gets the controller's context, which ends with the manager.
func (c *Controller) start(ctx context.Context) error {
	c.versions = map[schema.GroupResource]string{}
	c.kinds = map[schema.GroupResource]string{}
	c.retries = map[schema.GroupResource]string{}
	c.applyFailures = map[schema.GroupResource]int{}
	if err := c.resetStale(ctx); err != nil {
		return err
	}
	return c.watchStorageVersions(ctx)
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
