// Package encryption is the re-encryption controller: it watches what
// every API server reports about its encryption-at-rest configuration and,
// once they all have loaded the same new one, creates migrations that
// rewrite every object of the resources the operator listed, so that they
// are encrypted under the new configuration's key. It records, on each
// resource's StorageState, the configuration its last completed
// re-encryption was made under: the proof that the old keys are no longer
// needed for it. The decisions are package rotation's; this package reads
// the cluster and carries them out. The migration controller executes.
package encryption

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/apiservers"
	"github.com/svm-project/svm/internal/health"
	"github.com/svm-project/svm/internal/metrics"
	"github.com/svm-project/svm/internal/resources"
	"github.com/svm-project/svm/internal/rotation"
)

// loopName names the controller's loop for the liveness check.
const loopName = "encryption"

// FieldManager names the controller's writes.
const FieldManager = "svm-encryption"

// Reasons of the controller's events.
const (
	ReasonWaiting             = "WaitingForAPIServers"
	ReasonReencryptionCreated = "ReencryptionCreated"
	ReasonReencrypted         = "Reencrypted"
	ReasonSuperseded          = "Superseded"
)

// scrapeTimeout bounds the reading of one API server's metrics.
const scrapeTimeout = 30 * time.Second

// The controller reads the identity leases of the API servers and their
// /metrics, keeps status.encryption of the StorageStates the trigger
// creates, and creates and deletes its own migrations.
//
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=list,namespace=kube-system
// +kubebuilder:rbac:urls=/metrics,verbs=get
// +kubebuilder:rbac:groups=migration.k8s.io,resources=storagestates,verbs=list
// +kubebuilder:rbac:groups=migration.k8s.io,resources=storagestates/status,verbs=update
// +kubebuilder:rbac:groups=migration.k8s.io,resources=storageversionmigrations,verbs=list;watch;create;delete

// Controller is the re-encryption controller. It runs with leadership.
type Controller struct {
	// Client writes; Reader reads straight from the API server.
	Client client.Client
	Reader client.Reader
	// Leases lists the API servers' identity leases.
	Leases coordinationv1.LeasesGetter
	// Discovery resolves Resources.
	Discovery discovery.DiscoveryInterface
	// Config holds the credentials to read every API server's /metrics
	// with; its Host is one of the endpoints read.
	Config *rest.Config
	// Endpoints, if set, are the URLs of every API server, read instead of
	// Config.Host and the addresses the identity leases publish.
	Endpoints []string
	// Resources are the resources to re-encrypt, as the operator names
	// them (secrets, widgets.example.com).
	Resources []string
	// Interval between looks at the API servers. Default one minute, the
	// interval at which API servers look at their configuration file.
	Interval time.Duration
	// RetryBase and RetryMax bound the delay before a failed re-encryption
	// is followed by a new one. Defaults 1 minute and 1 hour.
	RetryBase, RetryMax time.Duration
	Clock               clock.Clock
	Recorder            events.EventRecorder
	Metrics             *metrics.Metrics
	Health              *health.Tracker

	kick    chan struct{}
	waiting string // the last reason to wait logged
}

// SetupWithManager adds the controller to mgr.
func (c *Controller) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	c.Interval = cmp.Or(c.Interval, time.Minute)
	c.RetryBase = cmp.Or(c.RetryBase, time.Minute)
	c.RetryMax = cmp.Or(c.RetryMax, time.Hour)
	c.kick = make(chan struct{}, 1)
	informer, err := mgr.GetCache().GetInformer(ctx, &migrationv1alpha1.StorageVersionMigration{})
	if err != nil {
		return err
	}
	// A re-encryption that ends is recorded at once, not at the next look.
	_, err = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*migrationv1alpha1.StorageVersionMigration)
			n, ok2 := newObj.(*migrationv1alpha1.StorageVersionMigration)
			if ok1 && ok2 && rotation.IsOwned(n) && o.IsFinished() != n.IsFinished() {
				c.poke()
			}
		},
	})
	if err != nil {
		return err
	}
	return mgr.Add(c)
}

func (c *Controller) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (c *Controller) NeedLeaderElection() bool { return true }

// Start looks at the API servers every Interval, and when a re-encryption
// ends or a retry falls due.
func (c *Controller) Start(ctx context.Context) error {
	log := klog.FromContext(ctx).WithName("encryption")
	ctx = klog.NewContext(ctx, log)
	c.Health.Start(loopName, health.StallAfter(c.Interval))
	defer c.Health.Stop(loopName)
	log.Info("Watching the API servers' encryption configurations", "resources", c.Resources, "interval", c.Interval)
	next := c.Clock.Now()
	var retry <-chan time.Time
	for {
		c.Health.Beat(loopName)
		select {
		case <-ctx.Done():
			return nil
		case <-c.Clock.After(max(next.Sub(c.Clock.Now()), 0)):
			next = c.Clock.Now().Add(c.Interval)
		case <-c.kick:
		case <-retry:
		}
		retry = nil
		if d := c.round(ctx); d > 0 {
			retry = c.Clock.After(d)
		}
	}
}

// Look reads every API server's report and puts them together.
func Look(ctx context.Context, leases coordinationv1.LeasesGetter, cfg *rest.Config, given []string, now time.Time) (rotation.Agreement, error) {
	ids, err := apiservers.Identities(ctx, leases, now)
	var idErr error
	if err != nil {
		// Without the leases, the servers reached are taken to be all:
		// say so, since a server not reached then goes unnoticed.
		idErr = err
		ids = nil
	}
	var reports []apiservers.Report
	var failures []rotation.Failure
	for _, endpoint := range apiservers.Endpoints(given, cfg.Host, ids) {
		sctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
		r, err := apiservers.Scrape(sctx, cfg, endpoint)
		cancel()
		if err != nil {
			failures = append(failures, rotation.Failure{Endpoint: endpoint, Err: err})
			continue
		}
		reports = append(reports, r)
	}
	return rotation.Agree(ids, reports, failures), idErr
}

// round looks at the API servers and decides for every resource. It
// returns when to look again for a retry or a write that must be redone.
func (c *Controller) round(ctx context.Context) time.Duration {
	log := klog.FromContext(ctx)
	a, err := Look(ctx, c.Leases, c.Config, c.Endpoints, c.Clock.Now())
	if err != nil {
		log.Error(err, "API servers not known from their identity leases; taking the ones reached to be all")
	}
	var servers []metrics.EncryptionServer
	for _, s := range a.Servers {
		servers = append(servers, metrics.EncryptionServer{IDHash: s.IDHash, ConfigHash: s.ConfigHash, Reached: s.Reached})
	}
	c.Metrics.EncryptionChecked(a.Agreed, servers)
	if a.Waiting != c.waiting {
		if a.Waiting != "" {
			log.Info("Re-encryption waits for the API servers", "reason", a.Waiting)
		} else {
			log.Info("Every API server has loaded the same encryption configuration", "configHash", a.ConfigHash, "since", a.Since, "servers", len(a.Servers))
		}
		c.waiting = a.Waiting
	}

	lists, failed, err := resources.DiscoverServed(c.Discovery)
	if err != nil {
		log.Error(err, "Discovery failed; nothing is decided this round")
		return c.Interval
	}
	var states migrationv1alpha1.StorageStateList
	var migrations migrationv1alpha1.StorageVersionMigrationList
	if err := c.Reader.List(ctx, &states); err != nil {
		log.Error(err, "List storage states")
		return c.Interval
	}
	if err := c.Reader.List(ctx, &migrations); err != nil {
		log.Error(err, "List migrations")
		return c.Interval
	}
	var next time.Duration
	for _, name := range c.Resources {
		r, err := resources.Resolve(lists, failed, name)
		if err != nil {
			log.Error(err, "Resolve a resource to re-encrypt", "resource", name)
			continue
		}
		gr := r.GroupResource()
		var state *migrationv1alpha1.StorageState
		if i := slices.IndexFunc(states.Items, func(s migrationv1alpha1.StorageState) bool {
			return s.Spec.Resource.Group == gr.Group && s.Spec.Resource.Resource == gr.Resource
		}); i >= 0 {
			state = &states.Items[i]
		}
		if state == nil {
			// The trigger creates every resource's StorageState at its
			// first round; this controller only adds to it, so that the
			// state always carries its storage version hashes.
			log.V(1).Info("No StorageState yet; deciding at the next look", "resource", gr)
			c.Metrics.ResourceRewritten(gr, false)
			continue
		}
		var ms []migrationv1alpha1.StorageVersionMigration
		for _, m := range migrations.Items {
			if m.Spec.Resource.Group == gr.Group && m.Spec.Resource.Resource == gr.Resource {
				ms = append(ms, m)
			}
		}
		d := rotation.Decide(rotation.Input{
			Now: c.Clock.Now(), Resource: resources.DisplayName(gr), Agreement: a, State: state, Migrations: ms,
			RetryBase: c.RetryBase, RetryMax: c.RetryMax,
		})
		recorded, err := c.apply(ctx, r, state, ms, d)
		if err != nil {
			log.Error(err, "Apply re-encryption decision", "resource", gr)
			next = shortest(next, 5*time.Second)
		}
		c.Metrics.ResourceRewritten(gr, rotation.Current(a, recorded))
		next = shortest(next, d.RequeueAfter)
	}
	return next
}

func shortest(a, b time.Duration) time.Duration {
	if b > 0 && (a == 0 || b < a) {
		return b
	}
	return a
}

// apply carries out a decision: stop svm's superseded re-encryptions,
// write the status, then create the migration. It returns what the
// StorageState records after it.
func (c *Controller) apply(ctx context.Context, r resources.Resource, state *migrationv1alpha1.StorageState,
	migrations []migrationv1alpha1.StorageVersionMigration, d rotation.Decision) (*migrationv1alpha1.StorageEncryption, error) {
	log := klog.FromContext(ctx).WithValues("resource", r.GroupResource())
	var recorded *migrationv1alpha1.StorageEncryption
	if state != nil {
		recorded = state.Status.Encryption
	}
	for _, name := range d.DeleteMigrations {
		i := slices.IndexFunc(migrations, func(m migrationv1alpha1.StorageVersionMigration) bool { return m.Name == name })
		m := &migrations[i]
		if err := c.Client.Delete(ctx, m, client.Preconditions{UID: &m.UID}); err != nil && !apierrors.IsNotFound(err) {
			return recorded, fmt.Errorf("stop re-encryption %s: %w", name, err)
		}
		c.event(m, nil, corev1.EventTypeNormal, ReasonSuperseded, "Delete",
			"Stopped: the API servers no longer agree on the configuration "+m.Annotations[rotation.ConfigHashAnnotation])
		log.Info("Stopped a re-encryption under a configuration the API servers no longer agree on", "migration", name)
	}
	if d.Status != nil {
		updated, err := c.writeStatus(ctx, state, d.Status)
		if err != nil {
			return recorded, err
		}
		state, recorded = updated, updated.Status.Encryption
		if !d.CreateMigration && !d.Rewritten && d.Status.ConfigHash == "" && d.Status.Message != "" {
			c.event(state, nil, corev1.EventTypeNormal, ReasonWaiting, "Wait", d.Status.Message)
		}
	}
	if d.Rewritten {
		c.event(state, nil, corev1.EventTypeNormal, ReasonReencrypted, "Record", d.Status.Message)
		log.Info("Re-encryption recorded", "configHash", d.Status.RewrittenConfigHash, "migration", d.Status.RewrittenBy)
	}
	if d.CreateMigration {
		if err := c.createMigration(ctx, r, state, recorded.ConfigHash); err != nil {
			return recorded, err
		}
	}
	return recorded, nil
}

// writeStatus sets status.encryption of a StorageState. The update
// carries the resourceVersion read: a state changed since (by the
// trigger, say) makes the write fail, and a look soon after decides again.
func (c *Controller) writeStatus(ctx context.Context, state *migrationv1alpha1.StorageState, e *migrationv1alpha1.StorageEncryption) (*migrationv1alpha1.StorageState, error) {
	updated := state.DeepCopy()
	updated.Status.Encryption = e.DeepCopy()
	if err := c.Client.Status().Update(ctx, updated, client.FieldOwner(FieldManager)); err != nil {
		return nil, fmt.Errorf("update status.encryption of storage state %s: %w", state.Name, err)
	}
	return updated, nil
}

func (c *Controller) createMigration(ctx context.Context, r resources.Resource, state *migrationv1alpha1.StorageState, configHash string) error {
	gr := r.GroupResource()
	m := &migrationv1alpha1.StorageVersionMigration{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: state.Name + "-reencrypt-",
			Labels:       map[string]string{rotation.CreatedByLabel: rotation.CreatedByValue},
			Annotations:  map[string]string{rotation.ConfigHashAnnotation: configHash},
		},
		Spec: migrationv1alpha1.StorageVersionMigrationSpec{
			Resource: migrationv1alpha1.GroupVersionResource{Group: gr.Group, Version: r.Version, Resource: gr.Resource},
		},
	}
	if err := c.Client.Create(ctx, m, client.FieldOwner(FieldManager)); err != nil {
		return fmt.Errorf("create re-encryption: %w", err)
	}
	c.Metrics.ReencryptionCreated(gr)
	c.event(state, m, corev1.EventTypeNormal, ReasonReencryptionCreated, "CreateMigration",
		fmt.Sprintf("Every API server has loaded encryption configuration %s: created migration %s to rewrite every object under it", configHash, m.Name))
	klog.FromContext(ctx).Info("Created re-encryption", "migration", klog.KObj(m), "resource", gr, "configHash", configHash)
	return nil
}

// event records an event; notes name configurations, hashes and
// migrations, never object contents or keys.
func (c *Controller) event(regarding, related runtime.Object, eventType, reason, action, note string) {
	if c.Recorder != nil {
		c.Recorder.Eventf(regarding, related, eventType, reason, action, "%s", note)
	}
}
