// Package retirereport is what svm retire reports of a retirement: the
// document `svm retire -o json` and `-o yaml` print, and the table people
// read, from what internal/operation's Retire found and did. The counts
// are the engine's own (Counts.Outcomes words them), never rebuilt.
package retirereport

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/operation"
	"github.com/svm-project/svm/internal/resources"
)

// Version identifies the shape of `svm retire -o json` (and -o yaml).
// Fields may be added under it; none changes meaning or goes away.
const Version = "v1"

// Name is how svm names a resource in one version: RESOURCE.VERSION.GROUP.
func Name(gvr schema.GroupVersionResource) string {
	return gvr.Resource + "." + gvr.Version + "." + gvr.Group
}

// Report is what `svm retire -o json` and `-o yaml` print, and what its
// table says.
type Report struct {
	Version string `json:"version"`
	// Resource is RESOURCE.VERSION.GROUP of the version retired; Kept is
	// the apiVersion written through and named instead.
	Resource string `json:"resource"`
	Kept     string `json:"kept,omitempty"`
	CRD      string `json:"crd,omitempty"`
	DryRun   bool   `json:"dryRun"`
	// Outcome is one word: done, nothingToDo, dryRun, inUse, unknown or
	// failed.
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
	// What was found before anything was written.
	MayBeStored   bool      `json:"mayBeStored"`
	StoredBecause string    `json:"storedBecause,omitempty"`
	Objects       int64     `json:"objects"`
	NamingVersion int64     `json:"managedFieldsNamingVersion"`
	Requests      []Request `json:"requests"`
	// What was done.
	Rewrite        *Rewrite `json:"rewrite,omitempty"`
	Pruned         bool     `json:"storedVersionsPruned"`
	StoredVersions []string `json:"storedVersions,omitempty"`
	Served         bool     `json:"served"`
	Unserved       bool     `json:"unserved"`
}

// Request is what one API server said of requests for the version.
type Request struct {
	Endpoint string     `json:"endpoint"`
	Since    *time.Time `json:"since,omitempty"`
	Requests int64      `json:"requests"`
	Open     int64      `json:"watchesOpen"`
	// SeenInWindow counts the requests during --unserve's quiet window.
	SeenInWindow int64  `json:"seenInQuietWindow"`
	Error        string `json:"error,omitempty"`
}

// Rewrite is what the rewrite did to the objects: every listed one
// under exactly one of restored, alreadyCurrent, writtenSinceStart, gone,
// failed and nothingToRewrite.
type Rewrite struct {
	Listed                 int64 `json:"listed"`
	Restored               int64 `json:"restored"`
	AlreadyCurrent         int64 `json:"alreadyCurrent"`
	WrittenSinceStart      int64 `json:"writtenSinceStart"`
	Gone                   int64 `json:"gone"`
	Failed                 int64 `json:"failed"`
	NothingToRewrite       int64 `json:"nothingToRewrite"`
	ManagedFieldsRewritten int64 `json:"managedFieldsRewritten"`
	// ManagedFieldsDropped is always 0: svm drops no owned field. An
	// entry whose fields cannot be moved is left, in ManagedFieldsLeft.
	ManagedFieldsDropped int64 `json:"managedFieldsDropped"`
	// ManagedFieldsLeft counts by reason the entries left naming the
	// version, and LeftEntries names them (the first 100).
	ManagedFieldsLeft *LeftCounts    `json:"managedFieldsLeft,omitempty"`
	LeftEntries       []LeftEntry    `json:"managedFieldsLeftEntries,omitempty"`
	FailedObjects     []FailedObject `json:"failedObjects,omitempty"`

	// counts are the counts the fields above show, for the table.
	counts operation.Counts
}

// LeftCounts counts the managedFields entries left naming the version, by
// reason: the same counts, in the same words, as a migration's
// status.progress.managedFieldsLeft.
type LeftCounts = migrationv1alpha1.ManagedFieldsLeft

// LeftEntry is a managedFields entry left naming the version, and why.
type LeftEntry struct {
	Namespace   string `json:"namespace,omitempty"`
	Name        string `json:"name"`
	Manager     string `json:"manager"`
	Operation   string `json:"operation"`
	Subresource string `json:"subresource,omitempty"`
	Reason      string `json:"reason"`
	Message     string `json:"message"`
}

// FailedObject is an object that could not be rewritten, and why.
type FailedObject struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Reason    string `json:"reason"`
}

// New is the report of what Retire returned, res and err, in a run that
// was a dry run or not.
func New(res operation.RetireResult, dryRun bool, err error) Report {
	r := Report{
		Version: Version, Resource: Name(res.Resource), Kept: res.Target, CRD: res.CRD, DryRun: dryRun,
		MayBeStored: res.MayBeStored, StoredBecause: res.StoredBecause, Objects: res.Objects, NamingVersion: res.NamingVersion,
		Requests: []Request{}, Pruned: res.Pruned, StoredVersions: res.StoredVersions, Served: res.Served, Unserved: res.Unserved,
	}
	for _, u := range res.Usage {
		q := Request{Endpoint: u.Endpoint, Requests: u.Requests, Open: u.Open, SeenInWindow: u.SeenInWindow, Error: u.Error}
		if !u.Since.IsZero() {
			q.Since = &u.Since
		}
		r.Requests = append(r.Requests, q)
	}
	if m := res.Migration; m != nil {
		c := m.Counts
		r.Rewrite = &Rewrite{
			Listed: c.Listed, Restored: c.Restored, AlreadyCurrent: c.AlreadyCurrent, WrittenSinceStart: c.WrittenSinceStart,
			Gone: c.Gone, Failed: c.Failed, NothingToRewrite: c.NothingToRewrite,
			ManagedFieldsRewritten: c.ManagedFieldsRewritten, counts: c,
		}
		if c.ManagedFieldsLeft.Total() > 0 {
			left := LeftCounts(c.ManagedFieldsLeft)
			r.Rewrite.ManagedFieldsLeft = &left
		}
		for _, f := range m.FailedObjects {
			r.Rewrite.FailedObjects = append(r.Rewrite.FailedObjects, FailedObject(f))
		}
		for _, l := range m.LeftEntries {
			r.Rewrite.LeftEntries = append(r.Rewrite.LeftEntries, LeftEntry{Namespace: l.Namespace, Name: l.Name,
				Manager: l.Manager, Operation: l.Operation, Subresource: l.Subresource, Reason: l.Reason, Message: l.Message})
		}
	}
	switch {
	case errors.Is(err, operation.ErrVersionInUse):
		r.Outcome = "inUse"
	case errors.Is(err, operation.ErrUsageUnknown):
		r.Outcome = "unknown"
	case errors.Is(err, operation.ErrManagedFieldsLeft):
		r.Outcome = "managedFieldsLeft"
	case err != nil:
		r.Outcome = "failed"
	case dryRun:
		r.Outcome = "dryRun"
	case res.NothingToDo:
		r.Outcome = "nothingToDo"
	default:
		r.Outcome = "done"
	}
	if err != nil {
		r.Error = err.Error()
	}
	return r
}

// WriteTable prints the report for people: what was found, then
// what was done, then one line that says where the version stands.
func WriteTable(out io.Writer, r Report, took time.Duration) {
	what := r.Resource
	if r.CRD != "" {
		what += " (customresourcedefinition " + r.CRD + ")"
	}
	fmt.Fprintf(out, "%s, kept: %s\n", what, r.Kept)
	if r.MayBeStored {
		fmt.Fprintf(out, "  stored:        %d objects may be stored in it: %s\n", r.Objects, r.StoredBecause)
	} else if r.StoredBecause != "" {
		fmt.Fprintf(out, "  stored:        nothing: %s\n", r.StoredBecause)
	}
	fmt.Fprintf(out, "  managedFields: %d of %d objects have entries naming it\n", r.NamingVersion, r.Objects)
	fmt.Fprintln(out, "  requests for it, per API server:")
	for _, u := range r.Requests {
		switch {
		case u.Error != "":
			fmt.Fprintf(out, "    %s: unknown: %s\n", u.Endpoint, u.Error)
		default:
			since := "its start"
			if u.Since != nil {
				since = u.Since.UTC().Format(time.RFC3339)
			}
			line := fmt.Sprintf("    %s: %d since %s, %d watches open", u.Endpoint, u.Requests, since, u.Open)
			if u.SeenInWindow > 0 {
				line += fmt.Sprintf(", %d during the quiet window", u.SeenInWindow)
			}
			fmt.Fprintln(out, line)
		}
	}
	if len(r.Requests) == 0 {
		fmt.Fprintln(out, "    none could be found")
	}
	if r.DryRun {
		fmt.Fprintf(out, "dry run, nothing written: %s\n", plan(r))
		return
	}
	if w := r.Rewrite; w != nil {
		fmt.Fprintf(out, "rewrote: listed %d: %s\n", w.Listed, w.counts.Outcomes())
		for _, f := range w.FailedObjects {
			fmt.Fprintf(out, "  failed %s: %s\n", resources.ObjectKey(f.Namespace, f.Name), f.Reason)
		}
		for _, l := range w.LeftEntries {
			fmt.Fprintf(out, "  left %s: entry of %s (%s%s): %s: %s\n", resources.ObjectKey(l.Namespace, l.Name), l.Manager, l.Operation,
				strings.TrimSuffix(" "+l.Subresource, " "), l.Reason, l.Message)
		}
	}
	if r.Pruned {
		fmt.Fprintf(out, "storedVersions: pruned to %v\n", r.StoredVersions)
	}
	if r.Unserved {
		fmt.Fprintln(out, "served: no longer")
	}
	switch r.Outcome {
	case "nothingToDo":
		fmt.Fprintln(out, "nothing to do: nothing is stored in it, no managedFields entry names it"+servedNote(r)+"; nothing written")
	case "done":
		fmt.Fprintf(out, "done in %s: nothing is stored in it, no managedFields entry names it%s\n", took.Round(time.Millisecond), servedNote(r))
	case "inUse":
		fmt.Fprintln(out, "not unserved: clients still use it:", r.Error)
	case "unknown":
		fmt.Fprintln(out, "not unserved: whether clients still use it is unknown:", r.Error)
	case "managedFieldsLeft":
		fmt.Fprintln(out, "not done: managedFields entries still name it, left as they were (above); removing it would make server-side apply fail on their objects")
	default:
		// Why follows on the error output.
		fmt.Fprintln(out, "not done")
	}
}

func servedNote(r Report) string {
	if r.Served {
		return "; it is still served"
	}
	return "; it is not served"
}

// plan says what a run without --dry-run would write.
func plan(r Report) string {
	switch {
	case r.MayBeStored && r.CRD != "":
		return fmt.Sprintf("would rewrite %d objects (%d with managedFields naming it), then prune status.storedVersions", r.Objects, r.NamingVersion)
	case r.MayBeStored:
		return fmt.Sprintf("would rewrite %d objects (%d with managedFields naming it)", r.Objects, r.NamingVersion)
	case r.NamingVersion > 0:
		return fmt.Sprintf("would rewrite the managedFields of %d objects", r.NamingVersion)
	}
	return "nothing to rewrite"
}
