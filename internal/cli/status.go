package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	storagemigrationv1 "k8s.io/api/storagemigration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/internal/controller/encryption"
	"github.com/svm-project/svm/internal/operation"
	"github.com/svm-project/svm/internal/rotation"
	"github.com/svm-project/svm/internal/status"
)

// StatusOptions are the options of `svm status`.
type StatusOptions struct {
	ConfigFlags *genericclioptions.ConfigFlags
	// Output is table, wide, json or yaml.
	Output   string
	Watch    bool
	Interval time.Duration
	// APIServerEndpoints are the URLs of every API server, to read each
	// one's encryption configuration from; empty for the kubeconfig's
	// server and the addresses the identity leases publish.
	APIServerEndpoints []string

	Out, ErrOut io.Writer
	// Terminal selects progress bars redrawn in place over plain lines.
	Terminal bool

	clusterReader
	// noted is the note last printed about an API that is not available,
	// so that --watch says it once.
	noted string
}

var statusOutputs = []string{"table", "wide", "json", "yaml"}

var (
	migrationsResource    = migrationv1alpha1.GroupVersion.WithResource("storageversionmigrations")
	storageStatesResource = migrationv1alpha1.GroupVersion.WithResource("storagestates")
)

func newStatusCommand(configFlags *genericclioptions.ConfigFlags, out, errOut io.Writer) *cobra.Command {
	o := &StatusOptions{ConfigFlags: configFlags, Out: out, ErrOut: errOut, Terminal: isTerminal(out)}
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show migrations, their progress, and which resources are fully migrated",
		Long: "Show svm's StorageVersionMigrations and the in-tree storagemigration.k8s.io ones with their\n" +
			"state, progress, rate and last error, and svm's StorageStates: a resource is migrated when\n" +
			"its objects may be stored in the current storage version only.\n" +
			"Where encryption at rest is configured or svm re-encrypts, also show the encryption\n" +
			"configuration each API server has loaded (read from its /metrics) and since when, whether\n" +
			"every object of each re-encrypted resource was rewritten under it, and what that means for\n" +
			"the old keys.\n" +
			"Works without svm's CRDs (in-tree migrations only) and without the in-tree API.",
		Example: "  svm status\n  svm status -o json\n  svm status --watch --interval 5s\n" +
			"  svm status --apiserver-endpoints https://10.0.0.1:6443,https://10.0.0.2:6443",
		Args: cobra.NoArgs,
		RunE: runOptions(o, func(ctx context.Context) (int, error) { return 0, o.Run(ctx) }),
	}
	fs := cmd.Flags()
	fs.StringVarP(&o.Output, "output", "o", "table", "output format: "+strings.Join(statusOutputs, ", ")+" (json and yaml have a stable, versioned structure)")
	fs.BoolVarP(&o.Watch, "watch", "w", false, "show a progress line per running migration, refreshed every --interval until interrupted")
	fs.DurationVar(&o.Interval, "interval", 2*time.Second, "time between refreshes with --watch")
	fs.StringSliceVar(&o.APIServerEndpoints, "apiserver-endpoints", nil, "URLs of every API server (https://host:port) (default: the kubeconfig's server and the identity leases' addresses)")
	return cmd
}

// Complete builds the clients. It sends no request: a server that cannot
// be reached is reported by Run.
func (o *StatusOptions) Complete() error {
	return o.connect(o.ConfigFlags)
}

// Validate checks the flags.
func (o *StatusOptions) Validate() error {
	if err := validateOutput(o.Output, statusOutputs); err != nil {
		return err
	}
	if o.Watch && o.Output != "table" && o.Output != "wide" {
		return fmt.Errorf("--watch shows progress lines and cannot be combined with --output %s", o.Output)
	}
	if o.Interval <= 0 {
		return fmt.Errorf("--interval must be positive, got %s", o.Interval)
	}
	return validateAPIServerEndpoints(o.APIServerEndpoints)
}

// Run prints the status once, or keeps refreshing it with --watch.
func (o *StatusOptions) Run(ctx context.Context) error {
	r, err := o.fetch(ctx)
	if err != nil {
		return err
	}
	if o.Watch {
		return o.watch(ctx, r)
	}
	switch o.Output {
	case "json":
		return status.WriteJSON(o.Out, r)
	case "yaml":
		return status.WriteYAML(o.Out, r)
	case "wide":
		return status.WriteWideTable(o.Out, r)
	default:
		return status.WriteTable(o.Out, r)
	}
}

// fetch reads svm's and the in-tree migrations and svm's StorageStates.
// Discovery comes first, so that an unreachable server is one plain error
// and an API that is not served is skipped rather than failed on.
func (o *StatusOptions) fetch(ctx context.Context) (*status.Report, error) {
	groups, err := o.Discovery.ServerGroups()
	if err != nil {
		return nil, o.unreachable(err)
	}
	in := status.Input{
		SVMServed:    served(groups, migrationv1alpha1.GroupVersion),
		InTreeServed: served(groups, storagemigrationv1.SchemeGroupVersion),
	}
	if in.SVMServed {
		if in.Migrations, err = listAs[migrationv1alpha1.StorageVersionMigration](ctx, o.Dynamic, migrationsResource); err != nil {
			return nil, err
		}
		if in.StorageStates, err = listAs[migrationv1alpha1.StorageState](ctx, o.Dynamic, storageStatesResource); err != nil {
			return nil, err
		}
	}
	note := ""
	if in.InTreeServed {
		list, err := o.Kube.StoragemigrationV1().StorageVersionMigrations().List(ctx, metav1.ListOptions{})
		switch {
		case apierrors.IsNotFound(err):
			// Gone since discovery: as if never served.
			in.InTreeServed = false
		case apierrors.IsForbidden(err) && in.SVMServed:
			// svm's own objects are what svm status is for; do not lose
			// them to a missing permission on the in-tree API.
			in.InTreeServed = false
			note = "note: not allowed to list storageversionmigrations." + storagemigrationv1.GroupName + "; showing svm's migrations only"
		case err != nil:
			return nil, fmt.Errorf("list storageversionmigrations.%s: %w", storagemigrationv1.GroupName, err)
		default:
			in.InTreeMigrations = list.Items
		}
	}
	if !in.SVMServed {
		note = "note: svm's CRDs are not installed (" + migrationv1alpha1.GroupVersion.String() + " is not served); showing in-tree migrations only"
		if !in.InTreeServed {
			note = "note: svm's CRDs are not installed and the server does not serve " + storagemigrationv1.SchemeGroupVersion.String() + ": there are no migrations to show"
		}
	}
	if note != "" && note != o.noted {
		fmt.Fprintln(o.ErrOut, note)
	}
	o.noted = note
	if !o.Watch {
		// --watch shows progress lines only: nothing of this.
		in.Encryption, in.EncryptionError = o.lookAtEncryption(ctx)
	}
	// Ages and the identity leases' liveness are of times the API server
	// stamps: read on its clock, not this machine's.
	in.Now = o.Clock.Now()
	return status.Build(in), nil
}

// encryptionTimeout bounds the reading of the API servers' encryption
// configurations: an address a lease publishes may not be reachable from
// where svm status runs, and the rest of the status must not wait long
// for it.
const encryptionTimeout = 15 * time.Second

// lookAtEncryption reads what every API server reports about its
// encryption configuration, as svm controller does. Nothing here fails
// svm status: a lease list or /metrics the user may not read is in the
// agreement (Waiting) or the error returned, and the report shows them
// only where encryption at rest is in use.
func (o *StatusOptions) lookAtEncryption(ctx context.Context) (*rotation.Agreement, string) {
	ctx, cancel := context.WithTimeout(ctx, encryptionTimeout)
	defer cancel()
	a, err := encryption.Look(ctx, o.Kube.CoordinationV1(), o.Servers, o.APIServerEndpoints, o.Clock.Now())
	if err != nil {
		return &a, err.Error()
	}
	return &a, ""
}

func served(groups *metav1.APIGroupList, gv schema.GroupVersion) bool {
	for _, g := range groups.Groups {
		if g.Name == gv.Group {
			return slices.ContainsFunc(g.Versions, func(v metav1.GroupVersionForDiscovery) bool { return v.Version == gv.Version })
		}
	}
	return false
}

// listAs lists gvr with the dynamic client and decodes the items into T:
// svm's API has no generated clientset.
func listAs[T any](ctx context.Context, client dynamic.Interface, gvr schema.GroupVersionResource) ([]T, error) {
	list, err := client.Resource(gvr).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list %s.%s: %w", gvr.Resource, gvr.Group, err)
	}
	out := make([]T, len(list.Items))
	for i := range list.Items {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, &out[i]); err != nil {
			return nil, fmt.Errorf("decode %s %s: %w", gvr.Resource, list.Items[i].GetName(), err)
		}
	}
	return out, nil
}

// watch shows a progress line per running migration and a summary, until
// ctx ends. A failed refresh is shown and the last report kept: a watch
// should outlive a blip of the API server.
func (o *StatusOptions) watch(ctx context.Context, r *status.Report) error {
	screen := &statusScreen{out: o.Out, terminal: o.Terminal}
	ticker := time.NewTicker(o.Interval)
	defer ticker.Stop()
	var refreshErr error
	for {
		lines := watchLines(r, o.Clock.Now())
		if refreshErr != nil {
			lines = append(lines, "refresh failed: "+refreshErr.Error())
		}
		screen.draw(lines)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		next, err := o.fetch(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if refreshErr = err; err == nil {
			r = next
		}
	}
}

// watchLines is one frame of --watch: svm's running migrations with the
// progress line of `svm migrate`, the in-tree ones by name (that API
// reports no progress), then the count of migrations by state.
func watchLines(r *status.Report, now time.Time) []string {
	var lines []string
	for _, m := range r.Migrations {
		if m.State != status.StateRunning && m.State != status.StateRetrying {
			continue
		}
		if m.Progress == nil {
			lines = append(lines, fmt.Sprintf("%s %s (%s: no progress reported)", m.Name, strings.ToLower(string(m.State)), m.Source))
			continue
		}
		var elapsed time.Duration
		if m.StartTime != nil {
			elapsed = now.Sub(m.StartTime.Time)
		}
		p := m.Progress
		line := progressLine(m.Name, operation.Progress{Counts: operation.Counts{
			Listed: p.Listed, Restored: p.Restored, AlreadyCurrent: p.AlreadyCurrent, WrittenSinceStart: p.WrittenSinceStart,
			WrittenSinceChange: p.WrittenSinceChange, Gone: p.Gone, Failed: p.Failed,
		}, RemainingEstimate: p.RemainingEstimate}, elapsed)
		if m.State == status.StateRetrying {
			line += " retrying: " + strings.Join(strings.Fields(m.Message), " ")
		}
		lines = append(lines, line)
	}
	return append(lines, status.Summary(r))
}

// statusScreen shows frames of lines: on a terminal each frame replaces
// the last in place; elsewhere (logs, CI) frames are simply appended.
type statusScreen struct {
	out      io.Writer
	terminal bool
	drawn    int
}

func (s *statusScreen) draw(lines []string) {
	var b strings.Builder
	if s.terminal {
		// Back to the first line of the last frame, and clear from there
		// down. A line wider than the terminal would wrap and throw the
		// count of lines to go back off, so lines are cut to fit.
		if s.drawn > 0 {
			fmt.Fprintf(&b, "\033[%dA", s.drawn)
		}
		b.WriteString("\r\033[J")
		width := terminalWidth(s.out)
		for i, l := range lines {
			if width > 1 && utf8.RuneCountInString(l) >= width {
				lines[i] = string([]rune(l)[:width-1])
			}
		}
		s.drawn = len(lines)
	}
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	_, _ = io.WriteString(s.out, b.String())
}

func terminalWidth(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	width, _, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 0
	}
	return width
}
