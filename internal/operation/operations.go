package operation

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/svm-project/svm/internal/kubeclients"
	"github.com/svm-project/svm/internal/migrator"
	"github.com/svm-project/svm/internal/resources"
)

// The engine's words, which every caller of the layer uses as they are:
// one type each, from the engine's counters to the callers' output.
type (
	// Tuning is how an operator tunes the engine (--workers, --qps, ...).
	Tuning = migrator.Tuning
	// Counts says where a migration's objects went; the one home of
	// svm's counters.
	Counts = migrator.Counts
	// LeftCounts counts managedFields entries left, by why.
	LeftCounts = migrator.LeftCounts
	// Progress is a migration's counts so far.
	Progress = migrator.Progress
	// Request asks for one resumable run of the engine.
	Request = migrator.Request
	// RunResult is what a run did, with the state to resume it from.
	RunResult = migrator.Result
	// State is what a run needs to resume where it left off.
	State = migrator.State
	// StoredSince says since when every object written is stored in the
	// target, so that a run skips them without a request.
	StoredSince = migrator.StoredSince
	// ManagedFields is how a run moves managedFields entries.
	ManagedFields = migrator.ManagedFields
	// Observer is told what the engine does (metrics, health).
	Observer = migrator.Observer
	// FailedObject and LeftEntry name an object that failed, and an
	// entry left, never with the object's contents.
	FailedObject = migrator.FailedObject
	LeftEntry    = migrator.LeftEntry
	// Refusal is an admission webhook or policy that refused writes.
	Refusal = migrator.Refusal
	// PacerState is adaptive pacing's state, for display, and
	// PacerDecision its last decision.
	PacerState    = migrator.PacerState
	PacerDecision = migrator.PacerDecision
)

// Adaptive pacing's decisions (PacerState.Decision).
const (
	PacerGrow    = migrator.PacerGrow
	PacerKnee    = migrator.PacerKnee
	PacerBackOff = migrator.PacerBackOff
	PacerHold    = migrator.PacerHold
)

// The engine's defaults, which svm's flags show.
const (
	DefaultWorkers    = migrator.DefaultWorkers
	DefaultBurst      = migrator.DefaultBurst
	DefaultChunkBytes = migrator.DefaultChunkBytes
)

// Observers tells every one of obs what the engine does.
func Observers(obs ...Observer) Observer { return migrator.Observers(obs...) }

// DefaultFieldManager names the writes when Tuning.FieldManager is empty.
const DefaultFieldManager = migrator.DefaultFieldManager

// DefaultCRDDrainMargin is twice kube-apiserver's default --request-timeout
// (1 minute): how long a write accepted under a CRD's previous storage
// version may land after the change (Options.CRDDrainMargin).
const DefaultCRDDrainMargin = 2 * time.Minute

// Options are what the operations of one Operations share.
type Options struct {
	// Tuning tunes the engine.
	Tuning Tuning
	// Observer, if set, is told what the engine does.
	Observer Observer
	// CRDDrainMargin is how long after a CRD's spec changed a write
	// accepted under its previous storage version may still land in
	// etcd. CRD and Retire, which prune storedVersions, list no object
	// before this long has passed since the CRD's spec last changed (as
	// its managedFields date it). 0 means DefaultCRDDrainMargin; a
	// negative margin does not wait.
	CRDDrainMargin time.Duration
	// OnDrainWait, if set, is told when CRD or Retire waits for
	// CRDDrainMargin to pass, and until when by this machine's clock (the
	// wait itself is measured on the API server's).
	OnDrainWait func(until time.Time)
	// OnProgress, if set, is told the counts of Resource, CRD and Retire
	// as chunks complete, and about every second while one is written.
	OnProgress func(schema.GroupVersionResource, Progress)
}

// Operations is the one way into svm's engine in a process: every command,
// controller and pkg/migrate migrates, prunes and retires through one.
// Build it once, over the process's clients.
type Operations struct {
	cfg     *rest.Config
	clients *kubeclients.Set
	engine  *migrator.Migrator
	opts    Options
}

// New builds the operations over cfg and the process's clients, with the
// engine tuned as opts.Tuning says: svm's own limiter replaces client-go's
// on the engine's requests, so Tuning.QPS is the one limit on them.
func New(cfg *rest.Config, clients *kubeclients.Set, opts Options) (*Operations, error) {
	engine, err := migrator.NewTuned(cfg, opts.Tuning, clients.Discovery, opts.Observer)
	if err != nil {
		return nil, &TerminalError{Reason: ReasonInvalidOptions, Err: err}
	}
	return &Operations{cfg: cfg, clients: clients, engine: engine, opts: opts}, nil
}

// Run runs the engine once over req.Resource, resumable from its State:
// for the callers that keep the state (the migration controller) or show
// it as it goes (svm migrate). Errors are the engine's, unwrapped.
func (o *Operations) Run(ctx context.Context, req Request) (RunResult, error) {
	return o.engine.Run(ctx, req)
}

// Lookup finds gvr in discovery, and refuses what cannot be migrated.
func (o *Operations) Lookup(ctx context.Context, gvr schema.GroupVersionResource) (*metav1.APIResource, error) {
	return o.engine.Lookup(ctx, gvr)
}

// LookupWithStatus is Lookup, and also says whether gvr has a status
// subresource svm can write through (Request.ThroughStatus).
func (o *Operations) LookupWithStatus(ctx context.Context, gvr schema.GroupVersionResource) (*metav1.APIResource, bool, error) {
	return o.engine.LookupWithStatus(ctx, gvr)
}

// Result is what a migration of one resource did. When it stopped early,
// the counts are those of its last completed chunk.
type Result struct {
	// Resource is the resource migrated.
	Resource schema.GroupVersionResource
	Counts
	// FailedObjects names the objects counted in Failed, the first 100.
	FailedObjects []FailedObject
	// LeftEntries names the entries counted in Counts.ManagedFieldsLeft,
	// the first 100.
	LeftEntries []LeftEntry
}

// Resource rewrites every object of gvr, so that each is stored again in
// the current storage version (and under the current encryption key)
// with its content unchanged. The error says which resource it is about;
// see pkg/migrate.Resource for what each kind means.
func (o *Operations) Resource(ctx context.Context, gvr schema.GroupVersionResource) (Result, error) {
	res, _, err := o.migrate(ctx, gvr, nil)
	return res, err
}

// migrate migrates gvr, moving managedFields as mf says (nil: leaving
// them), and also returns the storage version hash discovery reported at
// the start, which CRD compares with the CRD's.
func (o *Operations) migrate(ctx context.Context, gvr schema.GroupVersionResource, mf *ManagedFields) (Result, string, error) {
	req := Request{Resource: gvr, ManagedFields: mf}
	if o.opts.OnProgress != nil {
		req.OnProgress = func(p Progress) { o.opts.OnProgress(gvr, p) }
	}
	res, err := o.engine.Run(ctx, req)
	out := Result{Resource: gvr, Counts: res.Progress.Counts, FailedObjects: res.FailedObjects, LeftEntries: res.LeftEntries}
	return out, res.StorageVersionHash, wrap(resources.DisplayName(gvr.GroupResource()), err)
}

// fieldManager names the writes of the CRD's status and spec.
func (o *Operations) fieldManager() string { return o.engine.FieldManager() }
