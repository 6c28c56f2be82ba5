package migrate

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/svm-project/svm/internal/operation"
)

// DefaultQuietFor is how long Retire watches for requests before it stops
// serving a version, when RetireOptions.QuietFor is 0.
const DefaultQuietFor = operation.DefaultQuietFor

// RetireOptions tune Retire.
type RetireOptions struct {
	Options
	// DryRun finds what Retire would do, and writes nothing.
	DryRun bool
	// Unserve, once nothing is stored in the version and no managedFields
	// entry names it, stops serving it (spec.versions[].served: false on
	// the CRD), but only if no API server answered a request for it, nor
	// held a watch on it open, during QuietFor. CRDs only.
	Unserve bool
	// QuietFor is the window Unserve watches. 0 means DefaultQuietFor.
	QuietFor time.Duration
	// APIServers are the URLs of every API server, whose /metrics tell
	// the requests each answered. Empty: the rest.Config's host and every
	// address the API servers' identity leases publish.
	APIServers []string
}

// ServerUsage is what one API server (Endpoint) said of requests for the
// version: since it started (Since, zero when it does not tell), the
// Requests for it it answered and the watches on it it holds Open; the
// requests it answered during the quiet window (SeenInWindow, Unserve
// only); and why its metrics could not be read (Error, "" when they were).
type ServerUsage = operation.ServerUsage

// RetireResult is what Retire found, and what it did: the version kept
// (Target), the CRD if any, whether objects MayBeStored in the version
// retired and why (StoredBecause), how many Objects there are and how
// many name it (NamingVersion), every API server's Usage, the Migration,
// whether storedVersions were Pruned, and whether the version is Served
// and was Unserved; NothingToDo when nothing was left to do.
type RetireResult = operation.RetireResult

// Retire makes gvr's version one that can be removed, in order, each step
// only once the one before it is done:
//
//  1. Objects that may be stored in the version (a CRD's
//     status.storedVersions lists it; for another resource, its
//     StorageState does or there is none) are all rewritten, each in the
//     storage version, and in the same write their managedFields entries
//     that name the version are moved to the version written through,
//     keeping each manager's fields. A CRD's storedVersions are then
//     pruned, as CRD does.
//  2. Otherwise the objects whose managedFields name the version are
//     rewritten (that alone), and no other object is written.
//  3. With Unserve, the version stops being served, but only once no API
//     server answered a request for it for QuietFor (ErrVersionInUse
//     otherwise, naming them in Usage).
//
// Every write is the engine's: paced, and guarded by uid and
// resourceVersion, so that no other client's write is lost; an object
// another client writes meanwhile is read again and its entries rewritten
// as they are then. A field is kept wherever the version kept has it (see
// the package doc); an entry whose fields cannot be placed there is left
// as it is, and Retire then returns ErrManagedFieldsLeft without pruning
// storedVersions and without Unserve's step (Result.LeftEntries says which
// and why). A field that neither the version kept nor the object has owns
// nothing, and is dropped from its entry as the entry moves.
//
// Retire keeps no state: call it again after any error, and it goes on
// from what the cluster holds. When nothing is left to do it writes
// nothing (RetireResult.NothingToDo). A client that keeps writing through
// the version writes entries naming it again: Unserve is how to know no
// client does.
func Retire(ctx context.Context, cfg *rest.Config, gvr schema.GroupVersionResource, opts RetireOptions) (RetireResult, error) {
	ops, err := connect(cfg, opts.Options)
	if err != nil {
		return RetireResult{Resource: gvr}, err
	}
	return ops.Retire(ctx, gvr, operation.RetireOptions{DryRun: opts.DryRun, Unserve: opts.Unserve, QuietFor: opts.QuietFor, APIServers: opts.APIServers})
}
