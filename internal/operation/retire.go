package operation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/svm-project/svm/internal/apiservers"
	"github.com/svm-project/svm/internal/crdversions"
	"github.com/svm-project/svm/internal/managedfields"
	"github.com/svm-project/svm/internal/maybestored"
	"github.com/svm-project/svm/internal/resources"
)

// More reasons a TerminalError gives, about a version to retire.
const (
	// ReasonStorageVersion: the version to retire is the one objects are
	// stored in; make another the storage version first.
	ReasonStorageVersion = "StorageVersion"
	// ReasonNoOtherVersion: no other version of the resource is served
	// for its objects to be written through and its managedFields to name.
	ReasonNoOtherVersion = "NoOtherVersion"
	// ReasonNotACRD: only a CustomResourceDefinition's version can be
	// unserved by svm; kube-apiserver's own are served by its flags.
	ReasonNotACRD = "NotACRD"
)

// ErrVersionInUse means that an API server answered requests for the
// version during the quiet window, or holds a watch on it open: some
// client still uses it, and serving it was not stopped. RetireResult.Usage
// says which servers.
var ErrVersionInUse = errors.New("clients still use the version")

// ErrManagedFieldsLeft means that managedFields entries still name the
// version retired: their fields could not be placed in the version kept,
// so they were left as they were, and no manager lost a field. Removing
// the version would make server-side apply fail on their objects.
// RetireResult.Migration.LeftEntries says which and why; serving the
// version was not stopped.
var ErrManagedFieldsLeft = errors.New("managedFields entries still name the version")

// ErrUsageUnknown means that whether clients still use the version could
// not be told (an API server's metrics could not be read, or it restarted
// during the quiet window): serving it was not stopped.
var ErrUsageUnknown = errors.New("whether clients still use the version is unknown")

// DefaultQuietFor is how long Retire watches for requests before it stops
// serving a version, when RetireOptions.QuietFor is 0.
const DefaultQuietFor = 5 * time.Minute

// RetireOptions tune Retire.
type RetireOptions struct {
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

// ServerUsage is what one API server said of requests for the version.
type ServerUsage struct {
	// Endpoint is the API server's URL.
	Endpoint string
	// Since is when it started: Requests counts from then. Zero when it
	// does not tell.
	Since time.Time
	// Requests counts the requests for the version it answered since.
	Requests int64
	// Open counts the watches on the version it holds open.
	Open int64
	// SeenInWindow counts the requests it answered during the quiet
	// window (Unserve only).
	SeenInWindow int64
	// Error says why its metrics could not be read, "" when they were.
	Error string
}

// RetireResult is what Retire found, and what it did.
type RetireResult struct {
	// Resource is the resource in the version retired.
	Resource schema.GroupVersionResource
	// Target is the apiVersion (GROUP/VERSION) the objects are written
	// through and their managedFields name instead.
	Target string
	// CRD names the resource's CustomResourceDefinition; "" for a
	// built-in or aggregated resource.
	CRD string
	// MayBeStored says whether objects may still be stored in the
	// version when Retire looked, and StoredBecause why it thinks so.
	MayBeStored   bool
	StoredBecause string
	// Objects counts the resource's objects when Retire looked, and
	// NamingVersion those with a managedFields entry naming the version.
	Objects, NamingVersion int64
	// Usage is what each API server said of requests for the version.
	Usage []ServerUsage
	// Migration is what the rewrite did; nil when Retire wrote no object.
	Migration *Result
	// Pruned says whether Retire cut the CRD's status.storedVersions;
	// StoredVersions is what they were when Retire last read them.
	Pruned         bool
	StoredVersions []string
	// Served says whether the version was served when Retire returned,
	// and Unserved whether Retire stopped serving it.
	Served, Unserved bool
	// NothingToDo says that nothing was left to do: no object may be
	// stored in the version, none names it in its managedFields, and (with
	// Unserve) it is not served. Retire then wrote nothing.
	NothingToDo bool
}

// Retire makes gvr's version one that can be removed: it rewrites what
// may be stored in it (and prunes a CRD's storedVersions), moves the
// managedFields entries that name it, and with opts.Unserve stops serving
// it once no API server saw a request for it for opts.QuietFor. What it
// promises, and its errors, are pkg/migrate.Retire's.
func (o *Operations) Retire(ctx context.Context, gvr schema.GroupVersionResource, opts RetireOptions) (RetireResult, error) {
	res := RetireResult{Resource: gvr}
	if opts.QuietFor < 0 {
		return res, terminal(ReasonInvalidOptions, "quiet window must not be negative, got %s", opts.QuietFor)
	}
	if opts.QuietFor == 0 {
		opts.QuietFor = DefaultQuietFor
	}
	r := &retirement{Operations: o, gvr: gvr, opts: opts}
	if err := r.resolve(ctx, &res); err != nil {
		return res, err
	}
	if err := r.count(ctx, &res); err != nil {
		return res, err
	}
	if err := r.mayBeStored(ctx, &res); err != nil {
		return res, err
	}
	res.Usage = r.usage(ctx)
	res.NothingToDo = !res.MayBeStored && res.NamingVersion == 0 && (!opts.Unserve || !res.Served)
	if opts.DryRun || res.NothingToDo {
		return res, nil
	}
	if res.MayBeStored || res.NamingVersion > 0 {
		if err := r.rewrite(ctx, &res); err != nil {
			return res, err
		}
	}
	if m := res.Migration; m != nil && m.ManagedFieldsLeft.Total() > 0 {
		return res, fmt.Errorf("%s: %w: %d entries could not be moved (%s)", r.name(), ErrManagedFieldsLeft, m.ManagedFieldsLeft.Total(), m.ManagedFieldsLeft)
	}
	if opts.Unserve && res.Served {
		return res, r.unserve(ctx, &res)
	}
	return res, nil
}

// retirement is one call of Retire: what it was asked, and what it learnt.
type retirement struct {
	*Operations
	gvr  schema.GroupVersionResource
	opts RetireOptions

	crd    *apiextensionsv1.CustomResourceDefinition // nil for a built-in
	target schema.GroupVersionResource               // the version kept
	kind   string
	// createdBeforeCRD counts the objects created before crd was.
	createdBeforeCRD int64
}

// retired is the version retired, as managedFields name it.
func (r *retirement) retired() string { return r.gvr.GroupVersion().String() }

// name is how messages name the version retired.
func (r *retirement) name() string {
	return r.gvr.Resource + "." + r.gvr.Version + strings.TrimSuffix("."+r.gvr.Group, ".")
}

// resolve finds the version kept, and whether objects may be stored in the
// one retired.
func (r *retirement) resolve(ctx context.Context, res *RetireResult) error {
	if r.gvr.Group == "" {
		return terminal(ReasonNoOtherVersion, "the core group has one version, v1: there is none to retire %s for", r.gvr.Resource)
	}
	crd, err := r.clients.CRDs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, r.gvr.Resource+"."+r.gvr.Group, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return r.resolveBuiltIn(ctx, res)
	case err != nil:
		return crdError("read", r.gvr.Resource+"."+r.gvr.Group, err)
	}
	r.crd, r.kind = crd, crd.Spec.Names.Kind
	res.CRD = crd.Name
	s := crdversions.Of(crd)
	res.StoredVersions = slices.Clone(s.StoredVersions)
	res.Served = crdversions.Serves(crd, r.gvr.Version)
	if s.StorageVersion == r.gvr.Version {
		return terminal(ReasonStorageVersion, "%s is the storage version of customresourcedefinition %s: make another version the storage version first", r.gvr.Version, crd.Name)
	}
	version, ok := crdversions.Kept(crd, r.gvr.Version)
	if !ok {
		return terminal(ReasonNoOtherVersion, "customresourcedefinition %s serves no version but %s", crd.Name, r.gvr.Version)
	}
	r.target = r.gvr.GroupResource().WithVersion(version)
	res.Target = r.target.GroupVersion().String()
	return nil
}

// resolveBuiltIn resolves a resource that no CRD defines, from discovery:
// the version kept is the group's most preferred other version that serves
// the resource. What may be stored comes from svm's StorageState.
func (r *retirement) resolveBuiltIn(ctx context.Context, res *RetireResult) error {
	groups, err := r.clients.Discovery.ServerGroups()
	if err != nil {
		return fmt.Errorf("discover API groups: %w", err)
	}
	// Discovery lists a group's versions most preferred first.
	var versions []string
	for _, g := range groups.Groups {
		if g.Name == r.gvr.Group {
			for _, v := range g.Versions {
				versions = append(versions, v.Version)
			}
		}
	}
	var info *metav1.APIResource
	for _, v := range versions {
		list, err := r.clients.Discovery.ServerResourcesForGroupVersion(schema.GroupVersion{Group: r.gvr.Group, Version: v}.String())
		if err != nil {
			return fmt.Errorf("discover %s/%s: %w", r.gvr.Group, v, err)
		}
		for i := range list.APIResources {
			if list.APIResources[i].Name != r.gvr.Resource {
				continue
			}
			if v == r.gvr.Version {
				res.Served = true
			} else if info == nil {
				info, r.target = &list.APIResources[i], r.gvr.GroupResource().WithVersion(v)
			}
		}
	}
	if info == nil {
		return terminal(ReasonNoOtherVersion, "the server serves %s in no version but %s", resources.DisplayName(r.gvr.GroupResource()), r.gvr.Version)
	}
	r.kind = info.Kind
	res.Target = r.target.GroupVersion().String()
	if info.StorageVersionHash != "" && info.StorageVersionHash == resources.StorageVersionHash(r.gvr.Group, r.gvr.Version, r.kind) {
		return terminal(ReasonStorageVersion, "%s is the storage version of %s", r.gvr.Version, resources.DisplayName(r.gvr.GroupResource()))
	}
	return nil
}

// count counts the objects, those whose managedFields name the version
// retired, and those older than the CRD, listing them as a migration does:
// within Options.ChunkBytes, the answers decoded as they arrive.
func (r *retirement) count(ctx context.Context, res *RetireResult) error {
	rt := managedfields.Retarget{Retired: []string{r.retired()}}
	var before time.Time
	if r.crd != nil {
		before = r.crd.CreationTimestamp.Time
	}
	n, err := r.engine.Count(ctx, r.target, rt.Names, before)
	res.Objects += n.Objects
	res.NamingVersion += n.Matched
	r.createdBeforeCRD = n.CreatedBefore
	return wrap(resources.DisplayName(r.target.GroupResource()), err)
}

// mayBeStored answers whether objects may be stored in the version
// retired, from everything that tells (maybestored), the objects counted.
func (r *retirement) mayBeStored(ctx context.Context, res *RetireResult) error {
	e, err := r.Evidence(ctx, r.gvr, r.kind, r.crd)
	if err != nil {
		return err
	}
	e.CreatedBeforeCRD = r.createdBeforeCRD
	a := maybestored.Of(e)
	res.MayBeStored, res.StoredBecause = a.MayBeStored, a.String()
	return nil
}

// usage reads every API server's requests for the version retired.
func (r *retirement) usage(ctx context.Context) []ServerUsage {
	endpoints := r.opts.APIServers
	var unreached *ServerUsage
	if len(endpoints) == 0 {
		// Without leave to list identity leases, the kubeconfig's server
		// is still read.
		ids, _ := apiservers.Identities(ctx, r.clients.Kube.CoordinationV1(), r.clients.Clock.Now())
		endpoints = apiservers.Endpoints(nil, r.cfg.Host, ids)
		unreached = unreachedServers(len(ids), len(endpoints))
	}
	out := make([]ServerUsage, 0, len(endpoints)+1)
	for _, e := range endpoints {
		var u apiservers.Usage
		client, err := r.clients.Servers.For(e)
		if err == nil {
			u, err = apiservers.ScrapeUsage(ctx, client, e, r.gvr)
		}
		su := ServerUsage{Endpoint: e, Since: u.Since, Requests: int64(u.Requests), Open: int64(u.Open)}
		if err != nil {
			su.Error = err.Error()
		}
		out = append(out, su)
	}
	if unreached != nil {
		out = append(out, *unreached)
	}
	return out
}

// unreachedServers is an entry of unknown usage for the API servers that
// hold identity leases beyond the endpoints found to read (behind a load
// balancer, servers that publish no address): nil when there are none. A
// server that was not read may be the one a client still asks.
func unreachedServers(identities, endpoints int) *ServerUsage {
	if identities <= endpoints {
		return nil
	}
	return &ServerUsage{
		Endpoint: fmt.Sprintf("%d more API servers", identities-endpoints),
		Error:    fmt.Sprintf("%d API servers hold identity leases but only %d could be found to read; name them all with --apiserver-endpoints", identities, endpoints),
	}
}

// rewrite rewrites the objects: for a CRD whose storedVersions list the
// version retired, all of them, and prunes storedVersions, as CRD does;
// for another resource whose objects may be stored in it, all of them;
// else only those whose managedFields name it.
func (r *retirement) rewrite(ctx context.Context, res *RetireResult) error {
	if r.crd != nil && res.MayBeStored {
		out, err := r.migrateAndPrune(ctx, r.crd, r.target, CRDResult{Name: r.crd.Name})
		res.Migration, res.Pruned = out.Migration, out.Pruned
		if out.Pruned {
			res.StoredVersions = out.StoredVersionsAfter
		}
		return err
	}
	var mf *ManagedFields
	var err error
	if r.crd != nil {
		mf, err = r.FieldsToMove(ctx, r.crd, r.gvr.Version)
	} else {
		mf, err = r.fieldsMover(ctx, managedfields.Resource{Kept: r.target, Kind: r.kind, Retired: []string{r.gvr.Version}})
	}
	if err != nil || mf == nil {
		return err
	}
	mf.Only = !res.MayBeStored
	migration, _, err := r.migrate(ctx, r.target, mf)
	res.Migration = &migration
	return err
}

// FieldsToMove is how a migration of crd's resource moves the
// managedFields entries that name the versions crdversions.MoveOff names
// for retired ("" for every version a prune of storedVersions removes) to
// the version kept: the one choice svm migrate's CRD path, svm retire and
// the migration controller's executors make, with managedfields.For's
// rule (Migrator.FieldsMover). nil when no version is left to move
// entries off.
func (o *Operations) FieldsToMove(ctx context.Context, crd *apiextensionsv1.CustomResourceDefinition, retired string) (*ManagedFields, error) {
	kept, off, ok := crdversions.MoveOff(crd, retired)
	if !ok {
		return nil, nil
	}
	gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: kept, Resource: crd.Spec.Names.Plural}
	return o.fieldsMover(ctx, managedfields.Resource{Kept: gvr, Kind: crd.Spec.Names.Kind, Retired: off, CRD: crd})
}

// fieldsMover is managedfields.For's Mover of r (the engine's
// FieldsMover), reading only the OpenAPI documents of r's versions, each
// straight from its path (managedfields.Clients.Documents): not the index
// of every group-version's document, which grows with every CRD, at every
// read. nil when no version is left to move entries off.
func (o *Operations) fieldsMover(ctx context.Context, r managedfields.Resource) (*ManagedFields, error) {
	if o.clients.Discovery == nil {
		return o.engine.FieldsMover(ctx, o.clients.Dynamic, r)
	}
	mover, ok, err := managedfields.For(ctx, r, managedfields.Clients{
		Dynamic: o.clients.Dynamic, Documents: o.clients.Discovery.RESTClient(), FieldManager: o.engine.FieldManager(),
	})
	if err != nil || !ok {
		return nil, err
	}
	return &ManagedFields{Mover: mover}, nil
}

// unserve stops serving the version retired, once no API server answered a
// request for it during the quiet window and no object names it.
func (r *retirement) unserve(ctx context.Context, res *RetireResult) error {
	if r.crd == nil {
		return terminal(ReasonNotACRD, "%s is served by kube-apiserver's own flags (--runtime-config), which svm cannot change", r.name())
	}
	before := r.usage(ctx)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(r.opts.QuietFor):
	}
	after := r.usage(ctx)
	res.Usage = quietWindow(before, after)
	switch decideUnserve(res.Usage) {
	case unserveBusy:
		return fmt.Errorf("%s: %w: %s", r.name(), ErrVersionInUse, busyServers(res.Usage))
	case unserveUnknown:
		return fmt.Errorf("%s: %w", r.name(), ErrUsageUnknown)
	}
	// Nobody used the version in the window: nobody wrote an entry naming
	// it either, unless the rewrite left some. Counted again to be sure.
	again := RetireResult{}
	if err := r.count(ctx, &again); err != nil {
		return err
	}
	if again.NamingVersion > 0 {
		return fmt.Errorf("%s: %d objects' managedFields still name it; run retire again", r.name(), again.NamingVersion)
	}
	crds := r.clients.CRDs.ApiextensionsV1().CustomResourceDefinitions()
	for range maxPruneAttempts {
		crd, err := crds.Get(ctx, r.crd.Name, metav1.GetOptions{})
		if err != nil {
			return crdError("read", r.crd.Name, err)
		}
		if crd.UID != r.crd.UID || crdversions.StorageVersion(crd) == r.gvr.Version || slices.Contains(crd.Status.StoredVersions, r.gvr.Version) {
			return fmt.Errorf("customresourcedefinition %s: %w", crd.Name, ErrCRDChanged)
		}
		changed := false
		for i := range crd.Spec.Versions {
			if v := &crd.Spec.Versions[i]; v.Name == r.gvr.Version && v.Served {
				v.Served, changed = false, true
			}
		}
		if !changed {
			res.Served = false
			return nil
		}
		// The update carries the resourceVersion just read.
		_, err = crds.Update(ctx, crd, metav1.UpdateOptions{FieldManager: r.fieldManager()})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return crdError("stop serving "+r.gvr.Version+" of", crd.Name, err)
		}
		res.Served, res.Unserved = false, true
		return nil
	}
	return fmt.Errorf("stop serving %s of customresourcedefinition %s: %d conflicts in a row", r.gvr.Version, r.crd.Name, maxPruneAttempts)
}

// quietWindow is each server's usage at the end of the window, with the
// requests it answered during it; a server whose counters cannot be
// compared (unread, or restarted meanwhile) gets an Error.
func quietWindow(before, after []ServerUsage) []ServerUsage {
	out := slices.Clone(after)
	for i := range out {
		a := &out[i]
		if a.Error != "" {
			continue
		}
		j := slices.IndexFunc(before, func(b ServerUsage) bool { return b.Endpoint == a.Endpoint })
		switch {
		case j < 0 || before[j].Error != "":
			a.Error = "its metrics could not be read at the start of the window"
		case !before[j].Since.Equal(a.Since) || a.Requests < before[j].Requests:
			a.Error = "it restarted during the window: its requests before the restart are not known"
		default:
			a.SeenInWindow = a.Requests - before[j].Requests
		}
	}
	return out
}

type unserveVerdict int

const (
	unserveQuiet unserveVerdict = iota
	unserveBusy
	unserveUnknown
)

// decideUnserve decides from every server's usage over the quiet window:
// busy when any answered a request or holds a watch, unknown when any
// could not be read (and none was busy), quiet otherwise.
func decideUnserve(usage []ServerUsage) unserveVerdict {
	if len(usage) == 0 {
		return unserveUnknown
	}
	verdict := unserveQuiet
	for _, u := range usage {
		switch {
		case u.SeenInWindow > 0 || u.Open > 0:
			return unserveBusy
		case u.Error != "":
			verdict = unserveUnknown
		}
	}
	return verdict
}

// busyServers names the servers that saw the version used, and how.
func busyServers(usage []ServerUsage) string {
	var parts []string
	for _, u := range usage {
		if u.SeenInWindow > 0 || u.Open > 0 {
			parts = append(parts, fmt.Sprintf("%s answered %d requests for it during the window and holds %d watches on it", u.Endpoint, u.SeenInWindow, u.Open))
		}
	}
	return strings.Join(parts, "; ")
}
