package migrator

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
)

// No write of svm's may lose managedFields entries it did not mean to
// change. kube-apiserver before 1.37 clears every entry of an object when
// its field manager fails on a write that is not an apply
// (FieldManager.UpdateNoErrors in k8s.io/apimachinery's
// pkg/util/managedfields/internal/fieldmanager.go), and stores the object
// so: a conversion webhook that is down or too slow fails the field
// manager of every write whose object has an entry naming a version other
// than the one written through (kubernetes/kubernetes#136919). 1.37 keeps
// the stored entries instead (#136949, in no earlier release). svm's
// empty patch is such a write. So the engine
//
//   - remembers, of every listed object, the apiVersions its entries name
//     (held), which costs a few short strings per object;
//   - reads, of the answer to the write of an object that had entries,
//     whether it carries any (readAnswer), and stops the run with
//     ManagedFieldsLost, naming the object, when one lost them all;
//   - on an API server of a release that clears them, before it writes
//     the first object whose entries name another version, dry-runs that
//     write (probe): an answer without entries means the field manager
//     fails, and the run stops with ManagedFieldsAtRisk before any such
//     object is written;
//   - compares the answer to a write that moves entries with the entries
//     it sent (moveAnswered): the API server stores them as given, unless
//     its field manager failed.
//
// Only "all gone" is a loss: the API server also drops, by design, an
// entry naming a version it no longer has (structured-merge-diff removes a
// manager whose version is not registered), and merges the oldest Update
// entries past ten; neither takes what a manager can still use.

// fixedMinor is the first kube-apiserver minor whose field manager keeps
// an object's managedFields when it fails (kubernetes/kubernetes#136949).
const fixedMinor = 37

// held is what a listed object's managedFields held before svm wrote it:
// the apiVersions its entries name, each once; nil when it had none.
type held []string

// heldOf is what entries hold.
func heldOf[E any](entries []E, apiVersion func(E) string) held {
	var h held
	for _, e := range entries {
		if v := apiVersion(e); !slices.Contains(h, v) {
			h = append(h, v)
		}
	}
	return h
}

func entryVersion(e metav1.ManagedFieldsEntry) string { return e.APIVersion }

// namesOther reports whether an entry names another version than written:
// the object's write makes the field manager convert it to that version.
func (h held) namesOther(written string) bool {
	return slices.ContainsFunc(h, func(v string) bool { return v != written })
}

// clearsOnFailure reports whether an API server that reports v clears an
// object's managedFields when its field manager fails: kube-apiserver
// before 1.37. A version that cannot be read is taken to: the cost of
// being wrong is one dry run per migration.
func clearsOnFailure(v *version.Info) bool {
	if v == nil {
		return true
	}
	major, errMajor := leadingNumber(v.Major)
	minor, errMinor := leadingNumber(v.Minor)
	if errMajor != nil || errMinor != nil {
		return true
	}
	return major < 1 || major == 1 && minor < fixedMinor
}

// leadingNumber reads the number s starts with: some providers' minors
// carry a suffix ("35+").
func leadingNumber(s string) (int, error) {
	end := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if end >= 0 {
		s = s[:end]
	}
	return strconv.Atoi(s)
}

// lost reports whether an answer without managedFields entries lost some
// of h's: an entry naming the version written through, or another version
// of its group that the API server still has (served: one discovery lists
// or, for a custom resource, one its CRD defines, served or not; nil when
// unknown, and every version of the group then counts). The field manager
// drops by design, failure or not, an entry naming a version the server
// no longer has (neither served nor, for a custom resource, defined), and
// one naming another group's version: a resource served in two groups
// (events and events.k8s.io) keeps, written through one, only the entries
// of that group (kube-apiserver 1.37.2 answers svm's write of an Event
// through v1 whose only entry names events.k8s.io/v1 without it).
func lost(h held, written string, served func(string) bool) bool {
	group := groupOf(written)
	return slices.ContainsFunc(h, func(v string) bool {
		return v == written || groupOf(v) == group && (served == nil || served(v))
	})
}

// groupOf is the group of an apiVersion, "" for the core group's "v1".
func groupOf(apiVersion string) string {
	group, _, _ := strings.Cut(apiVersion, "/")
	if !strings.Contains(apiVersion, "/") {
		return ""
	}
	return group
}

// moveOutcome is what the API server did with the entries a write sent.
type moveOutcome int

const (
	// movedAsSent: the answer carries the entries sent.
	movedAsSent moveOutcome = iota
	// movedLost: the answer carries no entry at all.
	movedLost
	// movedNot: the answer carries other entries: the field manager
	// failed and kept the stored ones (kube-apiserver 1.37 and later).
	movedNot
)

// moveAnswered compares the entries a write sent with those its answer
// carries, by what the API server tells entries apart by: manager,
// operation, subresource and apiVersion.
func moveAnswered(sent, answered []metav1.ManagedFieldsEntry) moveOutcome {
	switch {
	case len(answered) == 0 && len(sent) > 0:
		return movedLost
	case len(answered) != len(sent):
		return movedNot
	}
	key := func(e metav1.ManagedFieldsEntry) string {
		return e.Manager + "\x00" + string(e.Operation) + "\x00" + e.Subresource + "\x00" + e.APIVersion
	}
	a, b := make([]string, len(sent)), make([]string, len(answered))
	for i := range sent {
		a[i], b[i] = key(sent[i]), key(answered[i])
	}
	slices.Sort(a)
	slices.Sort(b)
	if slices.Equal(a, b) {
		return movedAsSent
	}
	return movedNot
}

// guard is what a run learned of the API server's field manager, each
// read once, when first needed: its version, the versions it serves, and
// whether the probe has answered.
type guard struct {
	mu sync.Mutex
	// probed: no probe is needed any more (it answered, the server keeps
	// entries, or it cannot be asked); read without mu.
	probed atomic.Bool
	// stop, once set, is the probe's verdict that stops the run.
	stop error

	versionRead bool
	version     string // GitVersion; "" when it could not be read
	clears      bool

	servedRead bool
	served     map[string]bool // nil when it could not be read
}

// serverLocked reads the API server's version once; r.guard.mu is held.
func (r *run) serverLocked(ctx context.Context) {
	g := &r.guard
	if g.versionRead {
		return
	}
	var v *version.Info
	err := r.retry(ctx, "", func(ctx context.Context) error {
		var err error
		v, err = discovery.ToServerVersionInterfaceWithContext(r.m.discovery).ServerVersionWithContext(ctx)
		return err
	})
	if err != nil {
		v = nil
	}
	g.versionRead, g.clears = ctx.Err() == nil, clearsOnFailure(v)
	if v != nil {
		g.version = v.GitVersion
	}
}

// servedLocked is whether the API server still has an apiVersion, in
// the sense lost needs: whether its field manager converts entries naming
// it. That is a version discovery lists or, for a custom resource, one
// its CRD defines, served or not (see servedSet). Read once; nil when it
// cannot tell, discovery or the CRD unreadable. r.guard.mu is held.
func (r *run) servedLocked(ctx context.Context) func(string) bool {
	g := &r.guard
	if !g.servedRead {
		var groups *metav1.APIGroupList
		err := r.retry(ctx, "", func(ctx context.Context) error {
			var err error
			groups, err = discovery.ToServerGroupsInterfaceWithContext(r.m.discovery).ServerGroupsWithContext(ctx)
			return err
		})
		var defined []string
		if err == nil {
			defined, err = r.definedVersions(ctx)
		}
		g.servedRead = ctx.Err() == nil
		if err == nil {
			g.served = servedSet(groups, defined)
		}
	}
	if g.served == nil {
		return nil
	}
	return func(v string) bool { return g.served[v] }
}

// writtenVersion is the apiVersion svm writes through, as entries name it.
func (r *run) writtenVersion() string {
	return schema.GroupVersion{Group: r.req.Resource.Group, Version: r.req.Resource.Version}.String()
}

// probe comes before the write of obj, whose entries named h when it was
// listed. Before the first write of an object whose entries name another
// version than the one written through, on an API server that clears
// managedFields when its field manager fails, it dry-runs the write, which
// runs the same field manager and stores nothing: an answer without
// entries stops the run, ManagedFieldsAtRisk, before any such object is
// written. An answer with them settles it for the run. An error tells
// nothing (the write meets the same and is handled as such), so the next
// such object asks again; one no retry can fix (a dry run refused
// outright) ends the asking. A conversion webhook that goes down later in
// the run is caught by the answers (check), after the objects then in
// flight.
func (r *run) probe(ctx context.Context, obj *metav1.PartialObjectMetadata, h held) error {
	if r.guard.probed.Load() || !h.namesOther(r.writtenVersion()) {
		return nil
	}
	g := &r.guard
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stop != nil || g.probed.Load() {
		return g.stop
	}
	if r.serverLocked(ctx); !g.clears {
		g.probed.Store(g.versionRead)
		return nil
	}
	var a writeAnswer
	err := r.retryUpTo(ctx, "dryrun", 1, func(ctx context.Context) error {
		var err error
		a, err = r.patch(ctx, obj, patchAs{dryRun: true, entries: true})
		return err
	})
	switch {
	case err != nil && ctx.Err() != nil:
		return context.Cause(ctx)
	case err != nil:
		g.probed.Store(Classify(err) == Terminal)
		return nil
	case a.hasEntries || !lost(h, r.writtenVersion(), r.servedLocked(ctx)):
		g.probed.Store(true)
		return nil
	}
	g.stop = terminal(ReasonManagedFieldsAtRisk, "rewrite %s %s: a dry run of its write answered without its managedFields (its entries name %s): %s; "+
		"svm wrote no object whose entries need converting. Make the conversion webhook answer (or fix what the API server's log says of "+
		"\"failed to update managedFields\"), then migrate again",
		r.req.Resource.Resource, objectName(obj), strings.Join(h, ", "), g.defect())
	return g.stop
}

// check looks at the answer a to the write of obj, whose entries named h
// before it, and stops the run when the write lost them all (lostAll).
func (r *run) check(ctx context.Context, obj *metav1.PartialObjectMetadata, h held, a writeAnswer) error {
	if !a.entriesRead || a.hasEntries || len(h) == 0 {
		return nil
	}
	return r.lostAll(ctx, obj, h)
}

// lostAll is the verdict on a write of obj answered without any of the
// entries, which named h, it had or was sent with: unless the API server
// dropped them by design (lost), the run stops, ManagedFieldsLost, and the
// object is recorded as failed, never counted re-stored.
func (r *run) lostAll(ctx context.Context, obj *metav1.PartialObjectMetadata, h held) error {
	g := &r.guard
	g.mu.Lock()
	if !lost(h, r.writtenVersion(), r.servedLocked(ctx)) {
		g.mu.Unlock()
		return nil
	}
	r.serverLocked(ctx)
	defect := g.defect()
	g.mu.Unlock()
	err := terminal(ReasonManagedFieldsLost, "rewrite %s %s: the API server stored it without its managedFields (its entries named %s): %s; "+
		"svm stopped writing. Each manager's ownership of its fields on this object is gone; make the conversion webhook answer "+
		"(or fix what the API server's log says of \"failed to update managedFields\") before migrating again",
		r.req.Resource.Resource, objectName(obj), strings.Join(h, ", "), defect)
	r.recordFailure(obj, err)
	return err
}

// defect names the API server's known defect; g.mu is held.
func (g *guard) defect() string {
	const known = "kube-apiserver before 1.37 clears an object's managedFields when its field manager fails on a write, " +
		"as when a conversion webhook is down or too slow (kubernetes/kubernetes#136919, fixed in 1.37 by #136949)"
	switch {
	case g.version == "":
		return known + "; this API server's version could not be read"
	case g.clears:
		return fmt.Sprintf("%s; this API server is %s", known, g.version)
	}
	return fmt.Sprintf("%s; this API server reports %s: one that answered may be older, or an aggregated API server built on older libraries", known, g.version)
}
