package encryption

import (
	"cmp"
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	coordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/controller/round"
	"github.com/svm-project/svm/internal/health"
	"github.com/svm-project/svm/internal/kubeclients"
	"github.com/svm-project/svm/internal/metrics"
	"github.com/svm-project/svm/internal/rotation"
)

// loopName names the controller, and its rounds for the liveness check.
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

// The controller reads the identity leases of the API servers and their
// /metrics, keeps status.encryption of the StorageStates the trigger
// creates, and creates and deletes its own migrations.
//
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=list,namespace=kube-system
// +kubebuilder:rbac:urls=/metrics,verbs=get
// +kubebuilder:rbac:urls=/readyz/kms-providers,verbs=get
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
	// Servers reads every API server's /metrics, with the process's
	// credentials; its Host is one of the endpoints read.
	Servers *kubeclients.Endpoints
	// Endpoints, if set, are the URLs of every API server, read instead of
	// Servers.Host and the addresses the identity leases publish.
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
	// Health, if set, is told of every round: a leader whose rounds stop
	// coming fails the liveness probe.
	Health *health.Tracker

	begin   sync.Once
	waiting string // the last reason to wait logged
	// lastLook is when the last look began, and lastSeen what it saw:
	// the configuration the servers agreed on, or why they did not.
	lastLook time.Time
	lastSeen string
	// kmsSeen is the KMS v2 keys the servers agreed on at the last look,
	// with what each server had last seen of other keys, and kmsSince
	// the end of the first look that saw them so (see pinKMSSince).
	kmsSeen  string
	kmsSince time.Time
	// changedAfter is a time the servers' agreement is known to be newer
	// than: the beginning of the last look that saw something else.
	changedAfter time.Time
	// resolvedIn is the group version each name of Resources resolved in
	// at the last round that read every group version (resolveAll).
	resolvedIn map[string]schema.GroupVersion
}

// SetupWithManager adds the controller to mgr. It runs with leadership.
func (c *Controller) SetupWithManager(_ context.Context, mgr ctrl.Manager) error {
	c.setDefaults()
	b, err := round.NewControllerManagedBy(mgr, loopName, c.Health, c.Interval)
	if err != nil {
		return err
	}
	return b.
		// A re-encryption that ends is recorded at once, not at the next look.
		Watches(&migrationv1alpha1.StorageVersionMigration{}, round.After(0), round.Only(finishedChanged)).
		Complete(c)
}

func (c *Controller) setDefaults() {
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	c.Interval = cmp.Or(c.Interval, time.Minute)
	c.RetryBase = cmp.Or(c.RetryBase, time.Minute)
	c.RetryMax = cmp.Or(c.RetryMax, time.Hour)
}

// finishedChanged keeps the changes that end (or reopen) one of the
// controller's own re-encryptions.
func finishedChanged(before, after client.Object) bool {
	o, ok1 := before.(*migrationv1alpha1.StorageVersionMigration)
	n, ok2 := after.(*migrationv1alpha1.StorageVersionMigration)
	return ok1 && ok2 && rotation.IsOwned(n) && o.IsFinished() != n.IsFinished()
}

// Reconcile runs one round: it looks at the API servers and decides for
// every resource. The next round comes an Interval later, or when a retry
// the round asked for falls due, whichever is first.
func (c *Controller) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	c.begin.Do(func() { c.start(ctx) })
	retry := c.round(ctx)
	c.Health.Beat(loopName)
	return reconcile.Result{RequeueAfter: shortest(c.Interval, retry)}, nil
}

// start logs, once, what the controller watches.
func (c *Controller) start(ctx context.Context) {
	klog.FromContext(ctx).Info("Watching the API servers' encryption configurations", "resources", c.Resources, "interval", c.Interval)
}
