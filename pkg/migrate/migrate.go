package migrate

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"github.com/svm-project/svm/internal/managedfields"
	"github.com/svm-project/svm/internal/migrator"
	"github.com/svm-project/svm/internal/resources"
)

// DefaultFieldManager names the writes when Options.FieldManager is empty.
const DefaultFieldManager = migrator.DefaultFieldManager

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
	// CRDDrainMargin to pass, and until when.
	OnDrainWait func(until time.Time)
}

// DefaultCRDDrainMargin is twice kube-apiserver's default --request-timeout
// (1 minute): how long a write accepted under a CRD's previous storage
// version may land after the change (Options.CRDDrainMargin).
const DefaultCRDDrainMargin = 2 * time.Minute

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
func (o Options) tuning() migrator.Tuning {
	return migrator.Tuning{Workers: o.Workers, QPS: o.QPS, Burst: o.Burst, ChunkSize: o.ChunkSize, ChunkBytes: o.ChunkBytes, DisablePacing: o.DisableAdaptivePacing, FieldManager: o.FieldManager}
}

func (o Options) fieldManager() string {
	if o.FieldManager == "" {
		return DefaultFieldManager
	}
	return o.FieldManager
}

// Counts says where the listed objects went: each is counted under
// exactly one of Restored, AlreadyCurrent, WrittenSinceStart, Gone and
// Failed.
type Counts struct {
	// Listed counts the objects listed.
	Listed int64
	// Restored counts objects written back and stored anew: they were in
	// an old storage version (or under an old encryption key).
	Restored int64
	// AlreadyCurrent counts objects written back that the API server
	// left as they were: they were stored in the current form already.
	AlreadyCurrent int64
	// WrittenSinceStart counts objects another client wrote (or deleted
	// and re-created) after they were listed: that write stored them in
	// the current form, so they were not written again.
	WrittenSinceStart int64
	// Gone counts objects deleted after they were listed.
	Gone int64
	// Failed counts objects that could not be written back.
	Failed int64
	// NothingToRewrite counts objects a pass over managedFields alone
	// (Retire, when no object can be stored in the version retired) did
	// not write: none of their managedFields entries named the version.
	NothingToRewrite int64
	// ManagedFieldsRewritten counts the objects whose managedFields
	// entries were moved off the versions given up (CRD, Retire); each is
	// also counted in Restored.
	ManagedFieldsRewritten int64
	// ManagedFieldsLeft counts, by reason, the entries left naming a
	// version given up because their fields could not be placed in the
	// version kept. No manager loses a field: such an entry stays as it
	// was (Result.LeftEntries names them).
	ManagedFieldsLeft LeftCounts
	// Deprecated: svm drops no owned field, so this is always 0; an entry
	// whose fields cannot be placed is left whole (ManagedFieldsLeft).
	ManagedFieldsDropped int64
}

// LeftCounts counts managedFields entries left naming a version given up,
// by reason (see LeftEntry.Reason).
type LeftCounts struct {
	NotInVersion, NotServed, NotConverted, Refused, Unplaced int64
}

// Total is the number of entries left, whatever the reason.
func (l LeftCounts) Total() int64 {
	return l.NotInVersion + l.NotServed + l.NotConverted + l.Refused + l.Unplaced
}

// String says how many were left for each reason that left any.
func (l LeftCounts) String() string {
	var parts []string
	for _, r := range []struct {
		name string
		n    int64
	}{{"NotInVersion", l.NotInVersion}, {"NotServed", l.NotServed}, {"NotConverted", l.NotConverted}, {"Refused", l.Refused}, {"Unplaced", l.Unplaced}} {
		if r.n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", r.name, r.n))
		}
	}
	return strings.Join(parts, ", ")
}

// Migrated counts the objects now in the current form because the
// migration wrote them.
func (c Counts) Migrated() int64 { return c.Restored + c.AlreadyCurrent }

// Handled counts the listed objects whose outcome is known.
func (c Counts) Handled() int64 {
	return c.Migrated() + c.WrittenSinceStart + c.Gone + c.Failed + c.NothingToRewrite
}

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
type FailedObject struct {
	Namespace, Name, Reason string
}

// LeftEntry is a managedFields entry left naming a version given up: whose
// it is, on which object, and why; never the object's contents.
type LeftEntry struct {
	Namespace, Name string
	// Manager, Operation, Subresource and APIVersion are the entry's.
	Manager, Operation, Subresource, APIVersion string
	// Reason is one word: NotInVersion (the version kept has no such
	// field), NotServed (the API server cannot convert from the version),
	// NotConverted (the conversion does not carry the fields one to one),
	// Refused (the API server refused the dry run that converts them), or
	// Unplaced (no change to the object shows where a field is). Message
	// says which field, or what the API server answered.
	Reason, Message string
}

// Result is what a migration did. When it stopped early (see Resource's
// errors), the counts are those of its last completed chunk.
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
	if cfg == nil {
		return Result{Resource: gvr}, terminal(ReasonInvalidOptions, "no rest.Config")
	}
	if err := opts.validate(); err != nil {
		return Result{Resource: gvr}, err
	}
	m, err := newEngine(cfg, opts, nil)
	if err != nil {
		return Result{Resource: gvr}, err
	}
	res, _, err := migrateWith(ctx, m, gvr, nil, opts)
	return res, err
}

// migrateWith migrates gvr with m, moving managedFields as mf says (nil:
// leaving them), and also returns the storage version hash discovery
// reported at the start, which CRD compares with the CRD's.
func migrateWith(ctx context.Context, m *migrator.Migrator, gvr schema.GroupVersionResource, mf *migrator.ManagedFields, opts Options) (Result, string, error) {
	req := migrator.Request{Resource: gvr, ManagedFields: mf}
	if opts.OnProgress != nil {
		req.OnProgress = func(p migrator.Progress) {
			opts.OnProgress(Progress{Resource: gvr, Counts: countsOf(p), RemainingEstimate: p.RemainingEstimate})
		}
	}
	res, err := m.Run(ctx, req)
	out := Result{Resource: gvr, Counts: countsOf(res.Progress)}
	for _, f := range res.FailedObjects {
		out.FailedObjects = append(out.FailedObjects, FailedObject{Namespace: f.Namespace, Name: f.Name, Reason: f.Reason})
	}
	for _, l := range res.LeftEntries {
		out.LeftEntries = append(out.LeftEntries, LeftEntry{
			Namespace: l.Namespace, Name: l.Name, Manager: l.Manager, Operation: string(l.Operation), Subresource: l.Subresource,
			APIVersion: l.APIVersion, Reason: string(l.Reason), Message: l.Message,
		})
	}
	return out, res.StorageVersionHash, publicError(resources.DisplayName(gvr.GroupResource()), err)
}

// newEngine builds the engine over cfg as `svm migrate` does, with the
// engine's limiter as the one limit on requests, looking resources up with
// disc, the call's discovery client (nil: the engine builds its own).
func newEngine(cfg *rest.Config, opts Options, disc discovery.DiscoveryInterface) (*migrator.Migrator, error) {
	m, err := migrator.NewTuned(cfg, opts.tuning(), disc, nil)
	if err != nil {
		return nil, terminal(ReasonInvalidOptions, "%w", err)
	}
	return m, nil
}

func countsOf(p migrator.Progress) Counts {
	return Counts{
		Listed:            p.Listed,
		Restored:          p.Restored,
		AlreadyCurrent:    p.AlreadyCurrent,
		WrittenSinceStart: p.WrittenSinceStart,
		Gone:              p.Gone,
		Failed:            p.Failed,
		NothingToRewrite:  p.NothingToRewrite,

		ManagedFieldsRewritten: p.ManagedFieldsRewritten,
		ManagedFieldsLeft:      leftOf(p.ManagedFieldsLeft),
	}
}

func leftOf(left map[managedfields.Reason]int64) LeftCounts {
	return LeftCounts{
		NotInVersion: left[managedfields.NotInVersion], NotServed: left[managedfields.NotServed],
		NotConverted: left[managedfields.NotConverted], Refused: left[managedfields.Refused], Unplaced: left[managedfields.Unplaced],
	}
}

// Outcomes says where the objects went, in the words svm uses for them
// everywhere.
func (c Counts) Outcomes() string {
	s := fmt.Sprintf("listed %d: migrated %d (re-stored %d, already current %d), written since the start %d, gone %d, failed %d",
		c.Listed, c.Migrated(), c.Restored, c.AlreadyCurrent, c.WrittenSinceStart, c.Gone, c.Failed)
	if c.NothingToRewrite > 0 {
		s += fmt.Sprintf(", nothing to rewrite %d", c.NothingToRewrite)
	}
	left := c.ManagedFieldsLeft.Total()
	if c.ManagedFieldsRewritten > 0 || left > 0 {
		s += fmt.Sprintf("; managedFields moved on %d objects", c.ManagedFieldsRewritten)
	}
	if left > 0 {
		s += fmt.Sprintf(", entries left naming a version given up %d (%s)", left, c.ManagedFieldsLeft)
	}
	return s
}
