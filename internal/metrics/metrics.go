package metrics

import (
	"context"
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/svm-project/svm/internal/admission"
	"github.com/svm-project/svm/internal/migrator"
)

const (
	namespace        = "storage_migrator"
	engineSubsystem  = "core_migrator"
	triggerSubsystem = "trigger"
	encryptionSub    = "encryption"
)

// Statuses of finished migrations.
const (
	StatusSucceeded = "succeeded"
	StatusFailed    = "failed"
)

// Transitions of StorageStates.
const (
	TransitionCreated               = "created"
	TransitionStorageVersionChanged = "storage_version_changed"
	TransitionMigrated              = "migrated"
	TransitionReset                 = "reset"
	TransitionStoredVersionsPruned  = "stored_versions_pruned"
	TransitionPruneHeld             = "prune_held"
)

// Outcomes of objects (objects_total's outcome label): every listed object
// ends in exactly one.
const (
	OutcomeRestored          = "restored"
	OutcomeAlreadyCurrent    = "already_current"
	OutcomeWrittenSinceStart = "written_since_start"
	// OutcomeWrittenSinceChange: written after every API server stored
	// the resource in the target version, before the migration started.
	OutcomeWrittenSinceChange = "written_since_change"
	OutcomeGone               = "gone"
	OutcomeFailed             = "failed"
)

// SkipNewerThanCheckpoint is the skip reason of objects written or deleted
// since the migration started, as its list or its watch showed: they needed
// no request at all.
const SkipNewerThanCheckpoint = "newer_than_checkpoint"

// SkipNewerThanStorageChange is the skip reason of objects written after
// every API server stored the resource in the target version (the
// StorageState's currentStorageVersionRevision): they needed no request.
const SkipNewerThanStorageChange = "newer_than_storage_change"

// Metrics are svm's metrics. The zero value is not usable: call New. A nil
// *Metrics records nothing, so controllers built without metrics (in tests)
// need no checks.
type Metrics struct {
	migratedObjects   *prometheus.CounterVec
	objects           *prometheus.CounterVec
	remainingObjects  *prometheus.GaugeVec
	migrations        *prometheus.CounterVec
	migrationDuration *prometheus.HistogramVec
	runningMigrations *prometheus.GaugeVec
	listedObjects     *prometheus.GaugeVec
	skippedObjects    *prometheus.CounterVec
	failedObjects     *prometheus.CounterVec
	retries           *prometheus.CounterVec
	requests          *prometheus.CounterVec
	limiterWait       prometheus.Histogram
	pacerInFlight     *prometheus.GaugeVec
	pacerWindow       *prometheus.GaugeVec
	pacerLatency      *prometheus.GaugeVec
	pacerKnee         *prometheus.GaugeVec
	pacerDecisions    *prometheus.CounterVec
	admissionRefusals *prometheus.CounterVec

	executor *prometheus.GaugeVec

	discoveryPolls   prometheus.Counter
	discoveryErrors  *prometheus.CounterVec
	stateTransitions *prometheus.CounterVec
	pruneHeld        *prometheus.GaugeVec

	encryptionAgreed    *prometheus.GaugeVec
	encryptionServers   *prometheus.GaugeVec
	encryptionRewritten *prometheus.GaugeVec
	reencryptions       *prometheus.CounterVec

	historyDeleted *prometheus.CounterVec

	eventsDropped *prometheus.CounterVec
}

var _ migrator.Observer = (*Metrics)(nil)

// New creates svm's metrics, unregistered.
func New() *Metrics {
	engine := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: namespace, Subsystem: engineSubsystem, Name: name, Help: help}
	}
	trigger := func(name, help string) prometheus.Opts {
		return prometheus.Opts{Namespace: namespace, Subsystem: triggerSubsystem, Name: name, Help: help}
	}
	m := &Metrics{
		migratedObjects: prometheus.NewCounterVec(prometheus.CounterOpts(engine("migrated_objects",
			"Objects migrated (written, and re-stored or already current), by resource.")), []string{"resource"}),
		objects: prometheus.NewCounterVec(prometheus.CounterOpts(engine("objects_total",
			"Objects handled, by resource and outcome: restored, already_current, written_since_start, written_since_change, gone, failed.")), []string{"resource", "outcome"}),
		remainingObjects: prometheus.NewGaugeVec(prometheus.GaugeOpts(engine("remaining_objects",
			"The API server's estimate of objects the running migration of a resource has not listed yet; absent once it ends.")), []string{"resource"}),
		migrations: prometheus.NewCounterVec(prometheus.CounterOpts(engine("migrations",
			"Migrations that finished, by resource and status (succeeded, failed).")), []string{"resource", "status"}),
		migrationDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: engineSubsystem, Name: "migration_duration_seconds",
			Help: "Time from a migration's start to its end, across restarts, by status.",
			// One second to three days: small resources finish in seconds,
			// large ones at a low --qps take days.
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
			// By status alone: a histogram is a dozen series, and by
			// resource it was the largest part of what svm kept for every
			// resource it ever migrated (docs/metrics.md#cardinality).
		}, []string{"status"}),
		runningMigrations: prometheus.NewGaugeVec(prometheus.GaugeOpts(engine("running_migrations",
			"1 while a migration of the resource runs in this process; absent otherwise.")), []string{"resource"}),
		listedObjects: prometheus.NewGaugeVec(prometheus.GaugeOpts(engine("listed_objects",
			"Objects the running migration of a resource has listed so far, counting the runs it resumed; absent once it ends.")), []string{"resource"}),
		skippedObjects: prometheus.NewCounterVec(prometheus.CounterOpts(engine("skipped_objects_total",
			"Objects that needed no write, by resource and reason.")), []string{"resource", "reason"}),
		failedObjects: prometheus.NewCounterVec(prometheus.CounterOpts(engine("failed_objects_total",
			"Objects that could not be rewritten, by resource and error reason.")), []string{"resource", "reason"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts(engine("retries_total",
			"Requests retried after a transient error, by resource and error reason.")), []string{"resource", "reason"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts(engine("requests_total",
			"Requests sent by migrations, retries included, by resource and verb (list, patch, and get: an object read again to move its managedFields).")), []string{"resource", "verb"}),
		limiterWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Subsystem: engineSubsystem, Name: "rate_limiter_wait_seconds",
			Help: "Time each request of a migration waited for the --qps rate limiter.",
			// One millisecond (no wait to speak of) to four minutes.
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}),

		pacerInFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts(engine("pacer_writes_in_flight",
			"Writes in flight of the running migration of a resource, at adaptive pacing's last decision.")), []string{"resource"}),
		pacerWindow: prometheus.NewGaugeVec(prometheus.GaugeOpts(engine("pacer_window",
			"Writes adaptive pacing allows in flight for the running migration of a resource.")), []string{"resource"}),
		pacerLatency: prometheus.NewGaugeVec(prometheus.GaugeOpts(engine("pacer_smoothed_latency_seconds",
			"Recent average time a write of the running migration of a resource took (weighted as TCP smooths round trips).")), []string{"resource"}),
		pacerKnee: prometheus.NewGaugeVec(prometheus.GaugeOpts(engine("pacer_knee_writes",
			"The fewest writes in flight of the running migration of a resource that got 0.95 of the best rate adaptive pacing measured; 0 while only the most writes tried get it.")), []string{"resource"}),
		pacerDecisions: prometheus.NewCounterVec(prometheus.CounterOpts(engine("pacer_decisions_total",
			"Decisions of adaptive pacing of all migrations, by decision: grow (only the most writes tried get the best rate, or a relief forgot the points; the window grows by half), knee (the window set around the measured knee), back-off (a 429, a surge or a failed write cut it), hold (under --qps, the rate needed fewer writes in flight than the window: the epoch measured the cap, and the window holds).")), []string{"decision"}),

		admissionRefusals: prometheus.NewCounterVec(prometheus.CounterOpts(engine("admission_refusals_total",
			"Writes an admission webhook or policy refused, by resource, kind (Webhook, ValidatingAdmissionPolicy), name and then: written_through_status (the object was written through its status subresource instead) or failed.")), []string{"resource", "kind", "name", "then"}),

		executor: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "executor",
			Help: "1 for who executes svm's migrations in this process (svm or in-tree), once chosen."}, []string{"executor"}),

		discoveryPolls: prometheus.NewCounter(prometheus.CounterOpts(trigger("discovery_polls_total",
			"Discovery rounds of the triggering controller."))),
		discoveryErrors: prometheus.NewCounterVec(prometheus.CounterOpts(trigger("discovery_errors_total",
			"Discovery failures: scope round (the round concluded nothing) or group (one group version failed).")), []string{"scope"}),
		stateTransitions: prometheus.NewCounterVec(prometheus.CounterOpts(trigger("storage_state_transitions_total",
			"Changes of StorageStates, by transition.")), []string{"transition"}),
		pruneHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts(trigger("prune_held_entries",
			"managedFields entries naming a version to be pruned that hold the prune of the resource's CRD's status.storedVersions (StorageState status.pruneHeld), at svm's last look; 0 when none.")), []string{"resource"}),
	}
	addEncryption(m)
	m.historyDeleted = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "history", Name: "deleted_migrations_total",
		Help: "Finished migrations svm deleted beyond those its history limits keep, by resource and status (succeeded or failed)."}, []string{"resource", "status"})
	m.eventsDropped = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: "events", Name: "dropped_total",
		Help: "Events svm made but did not send, by reason: queue_full (more were waiting than its queue holds), refused (the API server refused them or did not answer after retries), invalid."}, []string{"reason"})
	return m
}

// addEncryption creates the re-encryption controller's metrics in m.
func addEncryption(m *Metrics) {
	// A vector without labels, so that it is absent (not 0) from a
	// process that does not look at encryption.
	m.encryptionAgreed = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: encryptionSub, Name: "config_agreed",
		Help: "1 when every API server was read at svm's last look and all have loaded the same encryption configuration, else 0."}, nil)
	m.encryptionServers = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: encryptionSub, Name: "apiserver_config_info",
		Help: "1 for each API server and the encryption configuration hash it reported at svm's last look (hash empty for none, reached false when it was not read)."},
		[]string{"apiserver_id_hash", "hash", "reached"})
	m.encryptionRewritten = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Subsystem: encryptionSub, Name: "resource_rewritten",
		Help: "1 when every object of the resource has been rewritten under the encryption configuration all API servers have loaded (keys it only reads with are no longer needed for it), else 0."},
		[]string{"resource"})
	m.reencryptions = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Subsystem: encryptionSub, Name: "reencryptions_total",
		Help: "Re-encryption migrations svm created, by resource."}, []string{"resource"})
}

// Collectors are every metric, for registration.
func (m *Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.migratedObjects, m.objects, m.remainingObjects, m.migrations, m.migrationDuration, m.runningMigrations,
		m.listedObjects, m.skippedObjects, m.failedObjects, m.retries, m.requests, m.limiterWait,
		m.pacerInFlight, m.pacerWindow, m.pacerLatency, m.pacerKnee, m.pacerDecisions, m.admissionRefusals,
		m.executor, m.discoveryPolls, m.discoveryErrors, m.stateTransitions, m.pruneHeld,
		m.encryptionAgreed, m.encryptionServers, m.encryptionRewritten, m.reencryptions,
		m.historyDeleted, m.eventsDropped,
	}
}

// Register registers every metric with reg, such as controller-runtime's
// metrics.Registry.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	for _, c := range m.Collectors() {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func label(r schema.GroupResource) string { return r.String() }

// RunStarted implements migrator.Observer.
func (m *Metrics) RunStarted(r schema.GroupResource) {
	if m == nil {
		return
	}
	m.runningMigrations.WithLabelValues(label(r)).Inc()
	m.listedObjects.WithLabelValues(label(r)).Set(0)
}

// RunEnded implements migrator.Observer. Whatever the outcome, nothing of
// the resource remains to be listed by this process now; whether the
// migration finished is for MigrationFinished to say. The gauges of a
// running migration go with it, listed_objects too: kept, they were seven
// series for every resource ever migrated, for the life of the process (a
// finished migration's counts are in its status).
// A resource runs one migration at a time in a process (the scheduler's
// rule), so no other run's gauges go with them.
func (m *Metrics) RunEnded(r schema.GroupResource, _ error) {
	if m == nil {
		return
	}
	for _, g := range []*prometheus.GaugeVec{m.runningMigrations, m.listedObjects, m.remainingObjects, m.pacerInFlight, m.pacerWindow, m.pacerLatency, m.pacerKnee} {
		g.DeleteLabelValues(label(r))
	}
}

// Listed implements migrator.Observer.
func (m *Metrics) Listed(r schema.GroupResource, listed int64, remaining *int64) {
	if m == nil {
		return
	}
	m.listedObjects.WithLabelValues(label(r)).Set(float64(listed))
	if remaining != nil {
		m.remainingObjects.WithLabelValues(label(r)).Set(float64(*remaining))
	}
}

// Requested implements migrator.Observer.
func (m *Metrics) Requested(r schema.GroupResource, verb string, _ error) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(label(r), verb).Inc()
}

// ObjectMigrated implements migrator.Observer.
func (m *Metrics) ObjectMigrated(r schema.GroupResource, restored bool) {
	if m == nil {
		return
	}
	m.migratedObjects.WithLabelValues(label(r)).Inc()
	outcome := OutcomeAlreadyCurrent
	if restored {
		outcome = OutcomeRestored
	}
	m.objects.WithLabelValues(label(r), outcome).Inc()
}

// ObjectSkipped implements migrator.Observer.
func (m *Metrics) ObjectSkipped(r schema.GroupResource, why migrator.SkipReason, err error) {
	if m == nil {
		return
	}
	reason, outcome := SkipNewerThanCheckpoint, OutcomeWrittenSinceStart
	switch why {
	case migrator.SkipWrittenSinceChange:
		reason, outcome = SkipNewerThanStorageChange, OutcomeWrittenSinceChange
	case migrator.SkipGone:
		outcome = OutcomeGone
	}
	if err != nil {
		reason = ErrorReason(err)
	}
	m.skippedObjects.WithLabelValues(label(r), reason).Inc()
	m.objects.WithLabelValues(label(r), outcome).Inc()
}

// Refused implements migrator.Observer.
func (m *Metrics) Refused(r schema.GroupResource, d admission.Denial, throughStatus bool) {
	if m == nil {
		return
	}
	then := "failed"
	if throughStatus {
		then = "written_through_status"
	}
	m.admissionRefusals.WithLabelValues(label(r), string(d.Kind), d.Name, then).Inc()
}

// ObjectFailed implements migrator.Observer.
func (m *Metrics) ObjectFailed(r schema.GroupResource, err error) {
	if m == nil {
		return
	}
	m.failedObjects.WithLabelValues(label(r), ErrorReason(err)).Inc()
	m.objects.WithLabelValues(label(r), OutcomeFailed).Inc()
}

// Retry implements migrator.Observer.
func (m *Metrics) Retry(r schema.GroupResource, err error) {
	if m == nil {
		return
	}
	m.retries.WithLabelValues(label(r), ErrorReason(err)).Inc()
}

// LimiterWaited implements migrator.Observer.
func (m *Metrics) LimiterWaited(_ schema.GroupResource, wait time.Duration) {
	if m == nil {
		return
	}
	m.limiterWait.Observe(wait.Seconds())
}

// Paced implements migrator.Observer: every call is one decision.
func (m *Metrics) Paced(r schema.GroupResource, s migrator.PacerState) {
	if m == nil {
		return
	}
	m.pacerInFlight.WithLabelValues(label(r)).Set(float64(s.InFlight))
	m.pacerWindow.WithLabelValues(label(r)).Set(float64(s.Window))
	m.pacerLatency.WithLabelValues(label(r)).Set(s.SmoothedLatency.Seconds())
	m.pacerKnee.WithLabelValues(label(r)).Set(s.Knee)
	m.pacerDecisions.WithLabelValues(string(s.Decision)).Inc()
}

// MigrationFinished records a migration that ended for good with status
// (StatusSucceeded or StatusFailed) after running for took.
func (m *Metrics) MigrationFinished(r schema.GroupResource, status string, took time.Duration) {
	if m == nil {
		return
	}
	m.migrations.WithLabelValues(label(r), status).Inc()
	m.migrationDuration.WithLabelValues(status).Observe(took.Seconds())
}

// ExecutorChosen records who executes svm's migrations: "svm" or "in-tree".
func (m *Metrics) ExecutorChosen(executor string) {
	if m == nil {
		return
	}
	m.executor.Reset()
	m.executor.WithLabelValues(executor).Set(1)
}

// DiscoveryPolled records a discovery round of the trigger: err when it
// failed altogether, or the number of group versions that failed.
func (m *Metrics) DiscoveryPolled(err error, failedGroups int) {
	if m == nil {
		return
	}
	m.discoveryPolls.Inc()
	if err != nil {
		m.discoveryErrors.WithLabelValues("round").Inc()
	}
	if failedGroups > 0 {
		m.discoveryErrors.WithLabelValues("group").Add(float64(failedGroups))
	}
}

// StorageStateTransition records a change of a resource's StorageState. The
// resource is not a label: each transition comes a few times in a
// resource's life, and a series for each would be kept for the life of the
// process; which resource changed is in the StorageState's Events and
// status.
func (m *Metrics) StorageStateTransition(_ schema.GroupResource, transition string) {
	if m == nil {
		return
	}
	m.stateTransitions.WithLabelValues(transition).Inc()
}

// PruneHeld records the managedFields entries that hold the prune of a
// resource's CRD's storedVersions, 0 for none.
func (m *Metrics) PruneHeld(r schema.GroupResource, entries int64) {
	if m == nil {
		return
	}
	m.pruneHeld.WithLabelValues(label(r)).Set(float64(entries))
}

// EncryptionServer is what one API server reported about its encryption
// configuration at svm's last look.
type EncryptionServer struct {
	IDHash, ConfigHash string
	Reached            bool
}

// EncryptionChecked records svm's look at the API servers' encryption
// configurations: whether they agree, and what each reported. Servers
// seen at an earlier look and gone since are dropped.
func (m *Metrics) EncryptionChecked(agreed bool, servers []EncryptionServer) {
	if m == nil {
		return
	}
	m.encryptionAgreed.WithLabelValues().Set(boolValue(agreed))
	m.encryptionServers.Reset()
	for _, s := range servers {
		m.encryptionServers.WithLabelValues(s.IDHash, s.ConfigHash, strconv.FormatBool(s.Reached)).Set(1)
	}
}

// ResourceRewritten records whether every object of r has been rewritten
// under the configuration all API servers have loaded.
func (m *Metrics) ResourceRewritten(r schema.GroupResource, rewritten bool) {
	if m == nil {
		return
	}
	m.encryptionRewritten.WithLabelValues(label(r)).Set(boolValue(rewritten))
}

// ReencryptionCreated counts a re-encryption migration svm created.
func (m *Metrics) ReencryptionCreated(r schema.GroupResource) {
	if m == nil {
		return
	}
	m.reencryptions.WithLabelValues(label(r)).Inc()
}

// FinishedMigrationDeleted counts a finished migration of r that svm
// deleted beyond its history limits; status is StatusSucceeded or
// StatusFailed.
func (m *Metrics) FinishedMigrationDeleted(r schema.GroupResource, status string) {
	if m == nil {
		return
	}
	m.historyDeleted.WithLabelValues(label(r), status).Inc()
}

// EventDropped counts an Event svm made but did not send, for reason (an
// eventrecorder.Dropped* reason).
func (m *Metrics) EventDropped(reason string) {
	if m == nil {
		return
	}
	m.eventsDropped.WithLabelValues(reason).Inc()
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// ErrorReason names the kind of a request error for a metric label: a
// small, fixed set, whatever the error's text.
func ErrorReason(err error) string {
	switch {
	case err == nil:
		return ""
	case apierrors.IsConflict(err):
		return "conflict"
	case apierrors.IsNotFound(err):
		return "not_found"
	case apierrors.IsGone(err), apierrors.IsResourceExpired(err):
		return "gone"
	case apierrors.IsTooManyRequests(err):
		return "throttled"
	case apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case apierrors.IsForbidden(err):
		return "forbidden"
	case apierrors.IsUnauthorized(err):
		return "unauthorized"
	case apierrors.IsInvalid(err):
		return "invalid"
	case apierrors.IsBadRequest(err):
		return "bad_request"
	case apierrors.IsMethodNotSupported(err):
		return "method_not_allowed"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		if status.Status().Code >= 500 {
			return "server_error"
		}
		return "other"
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return "timeout"
	}
	if migrator.IsTransient(err) {
		return "connection"
	}
	return "other"
}
