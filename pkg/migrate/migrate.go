package migrate

import (
	"context"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/svm-project/svm/internal/kubeclients"
	"github.com/svm-project/svm/internal/operation"
)

// DefaultFieldManager names the writes when Options.FieldManager is empty.
const DefaultFieldManager = operation.DefaultFieldManager

// Options tune a migration. The zero value is a good start.
type Options struct {
	// Workers is the most writes in flight at once. Adaptive pacing keeps
	// fewer, as many as take the API server just past the knee of its rate
	// curve, and halves them when it throttles or its rate collapses.
	// 0 means 64.
	Workers int
	// QPS caps the requests per second the migration sends, evenly spaced
	// (see Burst). 0 means no cap but the adaptive one above. It
	// replaces the rest.Config's own QPS, Burst and RateLimiter, which
	// are ignored for the migration's requests.
	QPS float64
	// ChunkSize is the number of objects listed per request: memory
	// grows with it, not with the number of objects. 0 means 500. Under
	// QPS, a list brings about a second's writes at that rate at most.
	ChunkSize int64
	// ChunkBytes is the most bytes of object metadata one list brings:
	// each list asks for as many objects as fit at the size of the last
	// chunk's, and one whose objects reach it first is asked again for
	// fewer. With ChunkSize it bounds the memory a migration holds,
	// whatever the objects' size. 0 means 8 MiB.
	ChunkBytes int64
	// FieldManager names the writes in the API server's audit log, and
	// the update of a CRD's status. "" means DefaultFieldManager.
	FieldManager string
	// Burst is the most requests sent at once under QPS. 0 means 1: the
	// requests evenly spaced, which costs other clients the least.
	Burst int
	// DisableAdaptivePacing keeps Workers writes in flight whatever the
	// API server's latency, for a maintenance window in which nothing
	// else needs the server.
	DisableAdaptivePacing bool
	// OnProgress, if set, is told the counts as chunks complete, and
	// about every second while a chunk is being written. It is called
	// from one goroutine at a time and must return quickly.
	OnProgress func(Progress)
	// CRDDrainMargin is how long after a CRD's spec changed a write the
	// API servers accepted under its previous storage version may still
	// land in etcd: a server keeps the old storage for the requests in
	// flight, up to twice its --request-timeout. CRD and Retire, which
	// prune storedVersions, list no object before this long has passed
	// since the CRD's spec last changed (as its managedFields date it):
	// such a write, landing after their list, would be left in a version
	// they prune. 0 means DefaultCRDDrainMargin; a negative margin does
	// not wait.
	CRDDrainMargin time.Duration
	// OnDrainWait, if set, is told when CRD or Retire waits for
	// CRDDrainMargin to pass, and until when by this machine's clock (the
	// wait itself is measured on the API server's).
	OnDrainWait func(until time.Time)
}

// DefaultCRDDrainMargin is twice kube-apiserver's default --request-timeout
// (1 minute): how long a write accepted under a CRD's previous storage
// version may land after the change (Options.CRDDrainMargin).
const DefaultCRDDrainMargin = operation.DefaultCRDDrainMargin

func (o Options) validate() error {
	switch {
	case o.Workers < 0:
		return terminal(ReasonInvalidOptions, "workers must not be negative, got %d", o.Workers)
	case o.QPS < 0 || math.IsNaN(o.QPS) || math.IsInf(o.QPS, 0):
		return terminal(ReasonInvalidOptions, "qps must be a non-negative number, got %v", o.QPS)
	case o.Burst < 0:
		return terminal(ReasonInvalidOptions, "burst must not be negative, got %d", o.Burst)
	case o.ChunkSize < 0:
		return terminal(ReasonInvalidOptions, "chunk size must not be negative, got %d", o.ChunkSize)
	case o.ChunkBytes < 0:
		return terminal(ReasonInvalidOptions, "chunk bytes must not be negative, got %d", o.ChunkBytes)
	}
	return nil
}

// tuning is what o says of the engine, in the engine's words.
func (o Options) tuning() operation.Tuning {
	return operation.Tuning{Workers: o.Workers, QPS: o.QPS, Burst: o.Burst, ChunkSize: o.ChunkSize, ChunkBytes: o.ChunkBytes, DisablePacing: o.DisableAdaptivePacing, FieldManager: o.FieldManager}
}

// operations is what o says of the operations, in the layer's words.
func (o Options) operations() operation.Options {
	out := operation.Options{Tuning: o.tuning(), CRDDrainMargin: o.CRDDrainMargin, OnDrainWait: o.OnDrainWait}
	if o.OnProgress != nil {
		out.OnProgress = func(gvr schema.GroupVersionResource, p operation.Progress) {
			o.OnProgress(Progress{Resource: gvr, Counts: p.Counts, RemainingEstimate: p.RemainingEstimate})
		}
	}
	return out
}

// Counts says where the listed objects went: each is counted under
// exactly one of Restored, AlreadyCurrent, WrittenSinceStart, Gone,
// Failed and NothingToRewrite (WrittenSinceChange is svm's controller's,
// and always 0 here). Counts.Outcomes says so in svm's words.
type Counts = operation.Counts

// LeftCounts counts managedFields entries left naming a version given up,
// by reason (see LeftEntry.Reason).
type LeftCounts = operation.LeftCounts

// Progress is a migration's counts so far.
type Progress struct {
	// Resource is the resource being migrated.
	Resource schema.GroupVersionResource
	Counts
	// RemainingEstimate is the API server's estimate of the objects not
	// listed yet, nil when it gave none.
	RemainingEstimate *int64
}

// FailedObject is an object that could not be rewritten: its name and the
// API server's reason, never its contents.
type FailedObject = operation.FailedObject

// LeftEntry is a managedFields entry left naming a version given up: whose
// it is, on which object, and why; never the object's contents.
type LeftEntry = operation.LeftEntry

// Result is what a migration did: the resource, its Counts, the objects
// counted in Failed (FailedObjects, the first 100) and the entries
// counted in Counts.ManagedFieldsLeft (LeftEntries, the first 100). When
// it stopped early (see Resource's errors), the counts are those of its
// last completed chunk.
type Result = operation.Result

// Resource rewrites every object of gvr, through the API server cfg
// points at, so that each is stored again in the current storage version
// (and under the current encryption key) with its content unchanged.
//
// The error is nil when every listed object was rewritten or needed no
// write. Otherwise it is an *ObjectsFailedError when some objects could
// not be rewritten (Result.FailedObjects says which and why), a
// *TerminalError when the resource cannot be migrated, the context's
// error when ctx ended, and anything else is transient trouble that
// outlived the engine's retries (see IsTransient): call again later. The
// Result holds the counts in every case.
func Resource(ctx context.Context, cfg *rest.Config, gvr schema.GroupVersionResource, opts Options) (Result, error) {
	ops, err := connect(cfg, opts)
	if err != nil {
		return Result{Resource: gvr}, err
	}
	return ops.Resource(ctx, gvr)
}

// connect checks opts and builds the operations of one call over cfg,
// with clients of its own.
func connect(cfg *rest.Config, opts Options) (*operation.Operations, error) {
	if cfg == nil {
		return nil, terminal(ReasonInvalidOptions, "no rest.Config")
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	clients, err := kubeclients.New(cfg)
	if err != nil {
		return nil, terminal(ReasonInvalidOptions, "%w", err)
	}
	return operation.New(cfg, clients, opts.operations())
}
