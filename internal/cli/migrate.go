package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	"github.com/svm-project/svm/internal/kubeclients"
	"github.com/svm-project/svm/internal/operation"
	"github.com/svm-project/svm/internal/resources"
)

// MigrateOptions are the options of `svm migrate`.
type MigrateOptions struct {
	ConfigFlags *genericclioptions.ConfigFlags
	Engine      EngineFlags
	All         bool
	Args        []string
	// ThroughStatus writes an object an admission webhook or policy
	// refuses through its status subresource instead (operation.Request).
	ThroughStatus bool
	// DryRun writes nothing: it says which admission webhooks and
	// policies would be asked about svm's writes (preflight).
	DryRun bool

	Out, ErrOut io.Writer
	// Terminal selects the progress bar over plain progress lines.
	Terminal bool

	config    *rest.Config
	clients   *kubeclients.Set
	resources []schema.GroupVersionResource
	ops       *operation.Operations
}

func newMigrateCommand(configFlags *genericclioptions.ConfigFlags, out, errOut io.Writer) *cobra.Command {
	o := &MigrateOptions{ConfigFlags: configFlags, Out: out, ErrOut: errOut, Terminal: isTerminal(out)}
	cmd := &cobra.Command{
		Use:   "migrate (RESOURCE[.GROUP]... | --all)",
		Short: "Rewrite every object of the given resources into their current storage version",
		Long: "Rewrite every object of the given resources so the API server re-encodes it in the current\n" +
			"storage version and under the current encryption key. Needs no controller and no CRDs.\n" +
			"Exits 0 only when every object was migrated.",
		Example: "  svm migrate secrets\n  svm migrate widgets.example.com deployments.apps --qps 50\n  svm migrate --all",
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Args = args
			return runOptions(o, func(ctx context.Context) (int, error) { return 0, o.Run(ctx) })(cmd, args)
		},
	}
	o.Engine.addFlags(cmd.Flags())
	cmd.Flags().BoolVar(&o.All, "all", false, "migrate every resource the server serves that can be listed and patched, once per storage")
	cmd.Flags().BoolVar(&o.ThroughStatus, "through-status", false, "write an object that admission refuses through its status subresource, where it has one")
	cmd.Flags().BoolVar(&o.DryRun, "dry-run", false, "write nothing: list, per resource, the admission webhooks and policies that would judge svm's writes")
	return cmd
}

// Complete loads the client configuration and builds the clients. It
// sends no request.
func (o *MigrateOptions) Complete() error {
	var err error
	o.config, o.clients, err = connectForDiscovery(o.ConfigFlags)
	return err
}

// Validate checks the flags.
func (o *MigrateOptions) Validate() error {
	if err := o.Engine.validate(); err != nil {
		return err
	}
	if o.All == (len(o.Args) > 0) {
		return errors.New("name the resources to migrate, or pass --all (not both)")
	}
	return nil
}

// resolve builds the operations and finds the resources to migrate.
func (o *MigrateOptions) resolve() error {
	var err error
	if o.ops, err = operation.New(o.config, o.clients, operation.Options{Tuning: o.Engine.tuning()}); err != nil {
		return err
	}
	if o.All {
		o.resources, err = allMigratable(o.clients.Discovery)
		return err
	}
	lists, failed, err := resources.DiscoverServed(o.clients.Discovery)
	if err != nil {
		return err
	}
	// Every name is resolved before anything is migrated: one that is
	// ambiguous or not served fails the command before its first write.
	resolved, err := resources.ResolveAll(lists, failed, o.Args)
	if err != nil {
		return err
	}
	for _, r := range resolved {
		o.resources = append(o.resources, r.GroupVersionResource)
	}
	return nil
}

// Run resolves every name before anything is migrated, then migrates the
// resources one after another and prints a summary of each. It fails
// unless every object of every resource was migrated (or needed no
// write), and says which were not and why.
func (o *MigrateOptions) Run(ctx context.Context) error {
	if err := o.resolve(); err != nil {
		return err
	}
	if o.DryRun {
		return o.preflight(ctx)
	}
	var notDone []string
	for _, gvr := range o.resources {
		if err := o.migrateOne(ctx, gvr); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			notDone = append(notDone, resources.DisplayName(gvr.GroupResource())+" ("+outcomeOf(err)+")")
		}
	}
	if len(notDone) > 0 {
		return fmt.Errorf("%d of %d resources were not fully migrated: %s", len(notDone), len(o.resources), strings.Join(notDone, ", "))
	}
	return nil
}

func (o *MigrateOptions) migrateOne(ctx context.Context, gvr schema.GroupVersionResource) error {
	name := resources.DisplayName(gvr.GroupResource())
	progress := newProgressPrinter(o.Out, name, o.Terminal)
	start := time.Now()
	res, err := o.ops.Run(ctx, operation.Request{Resource: gvr, OnProgress: progress.update, ThroughStatus: o.ThroughStatus})
	progress.done()
	printSummary(o.Out, name, res, err, time.Since(start))
	printFailure(o.ErrOut, name, res, err)
	return err
}

// outcomeOf names how a run ended, for summaries: "done" when err is nil.
func outcomeOf(err error) string {
	var partial *operation.ObjectsFailedError
	var terminal *operation.TerminalError
	switch {
	case err == nil:
		return "done"
	case errors.As(err, &partial):
		return "done, with failed objects"
	case errors.As(err, &terminal):
		return "failed: " + terminal.Reason
	default:
		return "stopped"
	}
}

// printSummary tells what a migration did, in the words svm uses
// everywhere (operation.Counts.Outcomes): how it ended, then every listed
// object under exactly one outcome, then the objects that failed. A run
// that stopped says so in its first word (and printFailure says why), and
// its counters are those of its last completed chunk: nothing more is
// claimed than what is known to be stored.
func printSummary(out io.Writer, name string, res operation.RunResult, err error, took time.Duration) {
	p := res.Progress
	fmt.Fprintf(out, "%s: %s: %d listed: %s in %s\n", name, outcomeOf(err), p.Listed, p.Outcomes(), took.Round(time.Millisecond))
	if p.Skipped() > 0 {
		// How objects others wrote were found tells what that cost.
		fmt.Fprintf(out, "  not written, known beforehand: %d; found by a conflict or not found: %d\n", p.SkippedWithoutWrite, p.Skipped()-p.SkippedWithoutWrite)
	}
	for _, f := range res.FailedObjects {
		fmt.Fprintf(out, "  failed %s: %s\n", resources.ObjectKey(f.Namespace, f.Name), f.Reason)
	}
	if p.Failed > int64(len(res.FailedObjects)) {
		fmt.Fprintf(out, "  ... and %d more\n", p.Failed-int64(len(res.FailedObjects)))
	}
	for _, r := range res.Refusals {
		fmt.Fprintf(out, "  %s\n", r)
	}
}

// printFailure says, on the error output, why a migration stopped or
// failed; failed objects are named in the summary.
func printFailure(errOut io.Writer, name string, res operation.RunResult, err error) {
	var partial *operation.ObjectsFailedError
	switch {
	case err == nil || errors.As(err, &partial):
	case outcomeOf(err) == "stopped":
		left := "the objects not listed yet"
		if r := res.Progress.RemainingEstimate; r != nil {
			left = fmt.Sprintf("about %d objects not listed yet", *r)
		}
		fmt.Fprintf(errOut, "%s: stopped before the end, %s not migrated: %v; run it again to finish\n", name, left, err)
	default:
		fmt.Fprintf(errOut, "%s: %v\n", name, err)
	}
}

// allMigratable lists every migratable resource, once per storage. A
// discovery round that missed some groups is an error: --all promises all.
func allMigratable(disc discovery.DiscoveryInterface) ([]schema.GroupVersionResource, error) {
	found, err := resources.Discover(disc)
	if err != nil {
		return nil, err
	}
	if len(found.FailedGroups) > 0 {
		failed := make([]string, 0, len(found.FailedGroups))
		for gv := range found.FailedGroups {
			failed = append(failed, gv.String())
		}
		slices.Sort(failed)
		return nil, fmt.Errorf("discovery failed for %s; not migrating a partial list", strings.Join(failed, ", "))
	}
	out := make([]schema.GroupVersionResource, 0, len(found.Resources))
	for _, r := range found.Resources {
		out = append(out, r.GroupVersionResource)
	}
	return out, nil
}
