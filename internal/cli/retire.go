package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"

	"github.com/svm-project/svm/internal/document"
	"github.com/svm-project/svm/internal/kubeclients"
	"github.com/svm-project/svm/internal/operation"
	"github.com/svm-project/svm/internal/resources"
)

// RetireReportVersion identifies the shape of `svm retire -o json` (and
// -o yaml).
// Fields may be added under it; none changes meaning or goes away.
const RetireReportVersion = "v1"

// RetireOptions are the options of `svm retire`.
type RetireOptions struct {
	ConfigFlags *genericclioptions.ConfigFlags
	Engine      EngineFlags
	Arg         string
	DryRun      bool
	Unserve     bool
	QuietFor    time.Duration
	// CRDDrainMargin is operation.Options.CRDDrainMargin.
	CRDDrainMargin time.Duration
	// APIServerEndpoints are the API servers whose requests are counted.
	APIServerEndpoints []string
	Output             string

	Out, ErrOut io.Writer
	Terminal    bool

	config  *rest.Config
	clients *kubeclients.Set
	// name, version and group are the parts of Arg.
	name, version, group string
	gvr                  schema.GroupVersionResource
}

var retireOutputs = []string{"table", "json", "yaml"}

func newRetireCommand(configFlags *genericclioptions.ConfigFlags, out, errOut io.Writer) *cobra.Command {
	o := &RetireOptions{ConfigFlags: configFlags, Out: out, ErrOut: errOut, Terminal: isTerminal(out)}
	cmd := &cobra.Command{
		Use:   "retire RESOURCE.VERSION.GROUP",
		Short: "Make an API version removable: nothing stored in it, no managedFields naming it, no client using it",
		Long: "Make an API version one that can be removed, in order, each step once the one before is done:\n\n" +
			"  1. rewrite every object that may be stored in the version (a CRD's status.storedVersions\n" +
			"     lists it; for other resources, svm's StorageState does or there is none), moving in the\n" +
			"     same write the managedFields entries that name it to the version kept, each manager\n" +
			"     keeping its fields; then prune the CRD's status.storedVersions;\n" +
			"  2. or, when nothing can be stored in it, rewrite only the objects whose managedFields name it;\n" +
			"  3. with --unserve, stop serving it (a CRD's spec.versions[].served: false), but only if no\n" +
			"     API server answered a request for it during --quiet-for.\n\n" +
			"An entry left naming a removed version makes every server-side apply on its object fail.\n" +
			"Every step is safe to repeat: run it again after any error. With nothing left to do it says\n" +
			"so and writes nothing. --dry-run shows what it would do and writes nothing.\n\n" +
			"An entry whose fields cannot be placed in the version kept (the API server cannot convert\n" +
			"them one to one, or refuses the dry run that does) is left as it is and listed: no manager\n" +
			"loses a field.\n\n" +
			"Exit codes: 0 done (or nothing to do, or a dry run), 3 a client still uses the version (not\n" +
			"unserved), 4 whether one does is unknown (not unserved), 1 it could not be done (entries\n" +
			"left naming it among the reasons).",
		Example: "  svm retire widgets.v1.example.com --dry-run\n" +
			"  svm retire widgets.v1.example.com\n" +
			"  svm retire widgets.v1.example.com --unserve --quiet-for 10m\n" +
			"  svm retire deviceclasses.v1beta2.resource.k8s.io   # after an upgrade stopped serving it",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Arg = args[0]
			return runOptions(o, func(ctx context.Context) (int, error) { return 0, o.Run(ctx) })(cmd, args)
		},
	}
	o.Engine.addFlags(cmd.Flags())
	fs := cmd.Flags()
	fs.BoolVar(&o.DryRun, "dry-run", false, "show what may be stored in the version, which objects' managedFields name it and the requests for it each API server saw; write nothing")
	fs.BoolVar(&o.Unserve, "unserve", false, "once done, stop serving the version (CRDs only), if no API server saw a request for it during --quiet-for")
	fs.DurationVar(&o.QuietFor, "quiet-for", operation.DefaultQuietFor, "how long every API server must answer no request for the version before --unserve stops serving it")
	fs.DurationVar(&o.CRDDrainMargin, "crd-drain-margin", operation.DefaultCRDDrainMargin, "before a CRD's objects are rewritten for a prune of its storedVersions, wait until this long has passed since its spec last changed: how long a write an API server accepted under the previous storage version may still land in etcd (twice kube-apiserver's --request-timeout, which is 1m by default); negative does not wait")
	fs.StringSliceVar(&o.APIServerEndpoints, "apiserver-endpoints", nil, "URLs of every API server, whose /metrics count the requests for the version (default: the kubeconfig's server and the addresses the API servers' identity leases publish)")
	fs.StringVarP(&o.Output, "output", "o", "table", "output format: "+strings.Join(retireOutputs, ", ")+" (json and yaml have a stable, versioned structure)")
	return cmd
}

// Complete loads the client configuration and builds the clients. It
// sends no request.
func (o *RetireOptions) Complete() error {
	var err error
	o.config, o.clients, err = connectForDiscovery(o.ConfigFlags)
	return err
}

// Validate checks the flags and RESOURCE.VERSION.GROUP.
func (o *RetireOptions) Validate() error {
	if err := o.Engine.validate(); err != nil {
		return err
	}
	if err := validateOutput(o.Output, retireOutputs); err != nil {
		return err
	}
	if o.QuietFor <= 0 {
		return fmt.Errorf("--quiet-for must be positive, got %s", o.QuietFor)
	}
	name, rest, ok := strings.Cut(o.Arg, ".")
	version, group, _ := strings.Cut(rest, ".")
	if !ok || version == "" || name == "" {
		return fmt.Errorf("%q: name the version to retire as RESOURCE.VERSION.GROUP, e.g. widgets.v1.example.com", o.Arg)
	}
	if group == "" {
		return fmt.Errorf("%q: the core group has one version, v1: there is none to retire it for", o.Arg)
	}
	o.name, o.version, o.group = name, version, group
	return nil
}

// resolve finds the resource named, as everywhere else in svm (plural,
// singular, short name or kind), in its group, whatever versions are
// served: the version need not be served any longer (an upgrade may have
// stopped it); the resource must be, in another version.
func (o *RetireOptions) resolve() error {
	lists, failed, err := resources.DiscoverServed(o.clients.Discovery)
	if err != nil {
		return err
	}
	r, err := resources.Resolve(lists, failed, o.name+"."+o.group)
	if err != nil {
		return err
	}
	if r.Group != o.group {
		return fmt.Errorf("%q: %s is in group %q, not %q", o.Arg, o.name, r.Group, o.group)
	}
	o.gvr = r.GroupResource().WithVersion(o.version)
	return nil
}

// Run resolves the resource, retires the version and prints what it found
// and did.
func (o *RetireOptions) Run(ctx context.Context) error {
	if err := o.resolve(); err != nil {
		return err
	}
	opts := operation.Options{
		Tuning: o.Engine.tuning(), CRDDrainMargin: o.CRDDrainMargin,
		OnDrainWait: func(until time.Time) {
			fmt.Fprintf(o.ErrOut, "waiting until %s (%s) for writes the API servers accepted under the previous storage version to land (--crd-drain-margin %s)\n",
				until.Format(time.TimeOnly), time.Until(until).Round(time.Second), o.CRDDrainMargin)
		},
	}
	name := retireName(o.gvr)
	var progress *progressPrinter
	if o.Output == "table" && !o.DryRun {
		progress = newProgressPrinter(o.Out, name, o.Terminal)
		opts.OnProgress = func(_ schema.GroupVersionResource, p operation.Progress) { progress.update(p) }
	}
	ops, err := operation.New(o.config, o.clients, opts)
	if err != nil {
		return err
	}
	start := time.Now()
	res, err := ops.Retire(ctx, o.gvr, operation.RetireOptions{DryRun: o.DryRun, Unserve: o.Unserve, QuietFor: o.QuietFor, APIServers: o.APIServerEndpoints})
	if progress != nil {
		progress.done()
	}
	report := newRetireReport(res, o.DryRun, err)
	if err != nil && res.Target == "" && o.Output == "table" {
		// Stopped before it found the version kept: there is nothing to
		// report but the error, which is printed once, below.
		return err
	}
	switch o.Output {
	case "json":
		if jerr := document.WriteJSON(o.Out, report); jerr != nil {
			return jerr
		}
	case "yaml":
		if yerr := document.WriteYAML(o.Out, report); yerr != nil {
			return yerr
		}
	default:
		writeRetireTable(o.Out, report, time.Since(start))
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, operation.ErrVersionInUse):
		return ExitError(ExitUnsafe)
	case errors.Is(err, operation.ErrUsageUnknown):
		return ExitError(ExitUnknown)
	}
	return err
}

// retireName is how svm names a resource in one version: RESOURCE.VERSION.GROUP.
func retireName(gvr schema.GroupVersionResource) string {
	return gvr.Resource + "." + gvr.Version + "." + gvr.Group
}

// RetireReport is what `svm retire -o json` and `-o yaml` print.
type RetireReport struct {
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
	MayBeStored   bool            `json:"mayBeStored"`
	StoredBecause string          `json:"storedBecause,omitempty"`
	Objects       int64           `json:"objects"`
	NamingVersion int64           `json:"managedFieldsNamingVersion"`
	Requests      []RetireRequest `json:"requests"`
	// What was done.
	Rewrite        *RetireRewrite `json:"rewrite,omitempty"`
	Pruned         bool           `json:"storedVersionsPruned"`
	StoredVersions []string       `json:"storedVersions,omitempty"`
	Served         bool           `json:"served"`
	Unserved       bool           `json:"unserved"`
}

// RetireRequest is what one API server said of requests for the version.
type RetireRequest struct {
	Endpoint string     `json:"endpoint"`
	Since    *time.Time `json:"since,omitempty"`
	Requests int64      `json:"requests"`
	Open     int64      `json:"watchesOpen"`
	// SeenInWindow counts the requests during --unserve's quiet window.
	SeenInWindow int64  `json:"seenInQuietWindow"`
	Error        string `json:"error,omitempty"`
}

// RetireRewrite is what the rewrite did to the objects: every listed one
// under exactly one of restored, alreadyCurrent, writtenSinceStart, gone,
// failed and nothingToRewrite.
type RetireRewrite struct {
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
// reason.
type LeftCounts struct {
	NotInVersion int64 `json:"notInVersion,omitempty"`
	NotServed    int64 `json:"notServed,omitempty"`
	NotConverted int64 `json:"notConverted,omitempty"`
	Refused      int64 `json:"refused,omitempty"`
	Unplaced     int64 `json:"unplaced,omitempty"`
}

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

func newRetireReport(res operation.RetireResult, dryRun bool, err error) RetireReport {
	r := RetireReport{
		Version: RetireReportVersion, Resource: retireName(res.Resource), Kept: res.Target, CRD: res.CRD, DryRun: dryRun,
		MayBeStored: res.MayBeStored, StoredBecause: res.StoredBecause, Objects: res.Objects, NamingVersion: res.NamingVersion,
		Requests: []RetireRequest{}, Pruned: res.Pruned, StoredVersions: res.StoredVersions, Served: res.Served, Unserved: res.Unserved,
	}
	for _, u := range res.Usage {
		q := RetireRequest{Endpoint: u.Endpoint, Requests: u.Requests, Open: u.Open, SeenInWindow: u.SeenInWindow, Error: u.Error}
		if !u.Since.IsZero() {
			q.Since = &u.Since
		}
		r.Requests = append(r.Requests, q)
	}
	if m := res.Migration; m != nil {
		c := m.Counts
		r.Rewrite = &RetireRewrite{
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

// writeRetireTable prints the report for people: what was found, then
// what was done, then one line that says where the version stands.
func writeRetireTable(out io.Writer, r RetireReport, took time.Duration) {
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
		fmt.Fprintf(out, "dry run, nothing written: %s\n", retirePlan(r))
		return
	}
	if w := r.Rewrite; w != nil {
		fmt.Fprintf(out, "rewrote: listed %d: %s\n", w.Listed, w.counts.Outcomes())
		for _, f := range w.FailedObjects {
			fmt.Fprintf(out, "  failed %s: %s\n", objectKey(f.Namespace, f.Name), f.Reason)
		}
		for _, l := range w.LeftEntries {
			fmt.Fprintf(out, "  left %s: entry of %s (%s%s): %s: %s\n", objectKey(l.Namespace, l.Name), l.Manager, l.Operation,
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

func servedNote(r RetireReport) string {
	if r.Served {
		return "; it is still served"
	}
	return "; it is not served"
}

// retirePlan says what a run without --dry-run would write.
func retirePlan(r RetireReport) string {
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
