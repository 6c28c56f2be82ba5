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
	"github.com/svm-project/svm/internal/retirereport"
)

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
			"     list it, or svm's StorageState, a failed in-tree migration or objects older than the\n" +
			"     CRD say so; for other resources, svm's StorageState does or there is none), moving in the\n" +
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
	fs.BoolVar(&o.DryRun, "dry-run", false, "write nothing: show what may be stored in the version, which managedFields name it and the requests for it")
	fs.BoolVar(&o.Unserve, "unserve", false, "once done, stop serving the version (CRDs only), if no API server saw a request for it during --quiet-for")
	fs.DurationVar(&o.QuietFor, "quiet-for", operation.DefaultQuietFor, "how long every API server must answer no request for the version before --unserve stops serving it")
	fs.DurationVar(&o.CRDDrainMargin, "crd-drain-margin", operation.DefaultCRDDrainMargin, "before rewriting a CRD's objects for a prune, wait until this long has passed since its spec changed (negative: no wait)")
	fs.StringSliceVar(&o.APIServerEndpoints, "apiserver-endpoints", nil, "URLs of every API server, whose /metrics count requests for the version (default: the kubeconfig's and the identity leases')")
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
	name := retirereport.Name(o.gvr)
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
	report := retirereport.New(res, o.DryRun, err)
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
		retirereport.WriteTable(o.Out, report, time.Since(start))
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
