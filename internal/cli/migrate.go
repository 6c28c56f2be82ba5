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
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/svm-project/svm/internal/migrator"
	"github.com/svm-project/svm/internal/resources"
)

// MigrateOptions are the options of `svm migrate`.
type MigrateOptions struct {
	ConfigFlags *genericclioptions.ConfigFlags
	Engine      EngineFlags
	All         bool
	Args        []string

	Out, ErrOut io.Writer
	// Terminal selects the progress bar over plain progress lines.
	Terminal bool

	config    *rest.Config
	resources []schema.GroupVersionResource
	migrator  *migrator.Migrator
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
			if err := o.Complete(cmd.Context()); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	o.Engine.addFlags(cmd.Flags())
	cmd.Flags().BoolVar(&o.All, "all", false, "migrate every resource the server serves that can be listed and patched, once per storage")
	return cmd
}

// Complete validates the flags and resolves the resources to migrate.
func (o *MigrateOptions) Complete(ctx context.Context) error {
	if err := o.Engine.validate(); err != nil {
		return err
	}
	if o.All == (len(o.Args) > 0) {
		return errors.New("name the resources to migrate, or pass --all (not both)")
	}
	var err error
	if o.config, err = restConfig(o.ConfigFlags); err != nil {
		return err
	}
	if o.migrator, err = o.Engine.newMigrator(o.config, nil); err != nil {
		return err
	}
	if o.All {
		o.resources, err = allMigratable(o.config)
		return err
	}
	mapper, err := resourceMapper(o.config)
	if err != nil {
		return err
	}
	for _, arg := range o.Args {
		gvr, err := mapper.ResourceFor(schema.ParseGroupResource(arg).WithVersion(""))
		if err != nil {
			return fmt.Errorf("resource %q: %w", arg, unwrapDiscovery(err))
		}
		o.resources = append(o.resources, gvr)
	}
	return nil
}

// Run migrates the resources one after another and prints a summary.
func (o *MigrateOptions) Run(ctx context.Context) error {
	failed := 0
	for _, gvr := range o.resources {
		if err := o.migrateOne(ctx, gvr); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d resources were not fully migrated", failed, len(o.resources))
	}
	return nil
}

func (o *MigrateOptions) migrateOne(ctx context.Context, gvr schema.GroupVersionResource) error {
	name := displayName(gvr)
	progress := newProgressPrinter(o.Out, name, o.Terminal)
	start := time.Now()
	res, err := o.migrator.Run(ctx, migrator.Request{Resource: gvr, OnProgress: progress.update})
	progress.done()
	printSummary(o.Out, name, res, time.Since(start))
	if err != nil {
		fmt.Fprintf(o.ErrOut, "%s: %v\n", name, err)
	}
	return err
}

// printSummary tells what a migration did: its counts, why objects were
// skipped, and which failed.
func printSummary(out io.Writer, name string, res migrator.Result, took time.Duration) {
	p := res.Progress
	fmt.Fprintf(out, "%s: rewritten %d, skipped %d, failed %d in %s\n", name, p.Rewritten, p.Skipped, p.Failed, took.Round(time.Millisecond))
	if p.Skipped > 0 {
		// Why objects were skipped tells an operator what else was
		// writing the resource meanwhile, and what that cost.
		fmt.Fprintf(out, "  skipped without a write (written or deleted since the start): %d; on conflict or not found: %d\n", p.SkippedWithoutWrite, p.Skipped-p.SkippedWithoutWrite)
	}
	for _, f := range res.FailedObjects {
		fmt.Fprintf(out, "  failed %s: %s\n", objectKey(f.Namespace, f.Name), f.Reason)
	}
	if p.Failed > int64(len(res.FailedObjects)) {
		fmt.Fprintf(out, "  ... and %d more\n", p.Failed-int64(len(res.FailedObjects)))
	}
}

// allMigratable lists every migratable resource, once per storage. A
// discovery round that missed some groups is an error: --all promises all.
func allMigratable(cfg *rest.Config) ([]schema.GroupVersionResource, error) {
	disc, err := resources.NewDiscoveryClient(cfg)
	if err != nil {
		return nil, err
	}
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

func displayName(gvr schema.GroupVersionResource) string {
	if gvr.Group == "" {
		return gvr.Resource
	}
	return gvr.Resource + "." + gvr.Group
}

func objectKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// resourceMapper resolves the names on the command line with an uncached
// discovery client. kubectl's cached mapper (ConfigFlags.ToRESTMapper) logs
// every failed discovery through klog before returning the error, so an
// unreachable server or rejected credentials would print the same failure
// two more times, as log lines, around svm's one-line error. A migration
// also wants what the server serves now, not a discovery cache hours old.
func resourceMapper(cfg *rest.Config) (meta.RESTMapper, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 50, 300 // what kubectl allows discovery
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	// Groups whose discovery failed are left out rather than failing every
	// name: the resources named may well be served by the others.
	groups, err := restmapper.GetAPIGroupResources(disc)
	if err != nil {
		return nil, fmt.Errorf("discover resources: %w", err)
	}
	return restmapper.NewShortcutExpander(restmapper.NewDiscoveryRESTMapper(groups), disc, nil), nil
}

// unwrapDiscovery turns a RESTMapper miss into a short message.
func unwrapDiscovery(err error) error {
	msg := err.Error()
	if strings.Contains(msg, "no matches for") {
		return errors.New("the server does not serve it")
	}
	return err
}
