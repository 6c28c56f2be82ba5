// Package cli is the svm command line: thin commands over svm's libraries.
// Each command is an options type with Complete, Validate and Run, in the
// style of kubectl, so it can be tested without a process and reused as a
// kubectl plugin.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// Version and Commit say which svm this is; `make image` sets them with
// -ldflags "-X github.com/svm-project/svm/internal/cli.Version=v1.2.3
// -X github.com/svm-project/svm/internal/cli.Commit=1a2b3c4". A binary
// built without them still tells what the go command recorded in it (see
// versionLine), so that a bug report can name the build.
var (
	Version = ""
	Commit  = ""
)

// Main runs svm with args and returns the process exit code. Errors are
// printed as one readable line, and exit with 1; an ExitError exits with
// its code, silently.
func Main(args []string, stdout, stderr io.Writer) int {
	root := NewRootCommand(stdout, stderr)
	root.SetArgs(args)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return exitCode(root.ExecuteContext(ctx), stderr)
}

// exitCode is the exit code for a command's error, which it prints
// unless it is an ExitError.
func exitCode(err error, stderr io.Writer) int {
	var exit ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return int(exit)
	}
	fmt.Fprintln(stderr, "svm:", err)
	return 1
}

// The exit codes of a verdict, which svm check-upgrade, svm etcd-scan and
// svm retire give. A verdict is an answer, not an error, and scripts
// branch on it: each has its own code, and 1 stays what it is for every
// svm command, "could not find out".
const (
	// ExitUnsafe: what was checked is not safe (an old key still in use,
	// a version still stored, clients still asking for it).
	ExitUnsafe = 3
	// ExitUnknown: whether it is safe could not be told.
	ExitUnknown = 4
)

// ExitError ends a command that has said what it found with an exit code
// that tells a script the outcome (check-upgrade's verdict, etcd-scan's
// failed check): not an error to print, and not exit code 1, which means
// the command could not do its work.
type ExitError int

func (e ExitError) Error() string { return fmt.Sprintf("exit code %d", int(e)) }

// commandOptions are a command's options in the style of kubectl:
// Complete builds what the command needs, Validate checks the flags.
type commandOptions interface {
	Complete() error
	Validate() error
}

// runOptions is the RunE of a command whose options complete, validate
// and then run. run returns the exit code of what it found and printed: a
// code other than 0 ends the command as an ExitError, with nothing more to
// print.
func runOptions(o commandOptions, run func(context.Context) (int, error)) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if err := o.Complete(); err != nil {
			return err
		}
		if err := o.Validate(); err != nil {
			return err
		}
		code, err := run(cmd.Context())
		if err != nil {
			return err
		}
		if code != 0 {
			return ExitError(code)
		}
		return nil
	}
}

// NewRootCommand builds the svm command tree.
func NewRootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "svm",
		Short: "svm rewrites Kubernetes objects into their current storage version",
		Long: "svm rewrites every stored object of a resource so the API server re-encodes it in the\n" +
			"current storage version and under the current encryption key.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	if name, ok := pluginDisplayName(os.Args[0]); ok {
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: name}
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	configFlags := genericclioptions.NewConfigFlags(true)
	configFlags.AddFlags(root.PersistentFlags())
	root.AddCommand(
		newVersionCommand(stdout),
		newMigrateCommand(configFlags, stdout, stderr),
		newControllerCommand(configFlags),
		newStatusCommand(configFlags, stdout, stderr),
		newCheckUpgradeCommand(configFlags, stdout, stderr),
		newEtcdScanCommand(stdout, stderr),
		newRetireCommand(configFlags, stdout, stderr),
	)
	return root
}

func newVersionCommand(out io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print svm's version, the commit it was built from, and its Go version",
		Args:  cobra.NoArgs,
		Run: func(*cobra.Command, []string) {
			info, _ := debug.ReadBuildInfo()
			fmt.Fprintln(out, versionLine(Version, Commit, info))
		},
	}
}

// versionLine is what `svm version` prints, e.g.
// "svm v0.3.0 (commit 1a2b3c4, go1.26.8, linux/amd64)". Values stamped
// with -ldflags win; without them, the module version `go install
// ...@v0.3.0` records, and the git revision a build in a checkout records
// (shortened as in Go's pseudo-versions, "-dirty" when the tree had
// changes); "dev" and "unknown" when there is nothing to go on.
func versionLine(version, commit string, info *debug.BuildInfo) string {
	if version == "" && info != nil && info.Main.Version != "" && info.Main.Version != "(devel)" {
		version = info.Main.Version
	}
	if version == "" {
		version = "dev"
	}
	if commit == "" && info != nil {
		commit = recordedRevision(info.Settings)
	}
	if commit == "" {
		commit = "unknown"
	}
	return fmt.Sprintf("svm %s (commit %s, %s, %s/%s)", version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// recordedRevision is the git revision in the go command's build
// settings, or "".
func recordedRevision(settings []debug.BuildSetting) string {
	var revision, modified string
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			revision = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if revision == "" {
		return ""
	}
	revision = revision[:min(12, len(revision))]
	if modified == "true" {
		revision += "-dirty"
	}
	return revision
}

// pluginDisplayName is how kubectl users call svm when its binary is
// installed as a kubectl plugin: kubectl runs kubectl-svm for `kubectl svm`,
// and help and usage should show what the user types. kubectl reads a
// dash in a plugin's file name as a space and an underscore as a dash.
func pluginDisplayName(argv0 string) (string, bool) {
	base := strings.TrimSuffix(filepath.Base(argv0), ".exe")
	name, ok := strings.CutPrefix(base, "kubectl-")
	if !ok || name == "" {
		return "", false
	}
	return "kubectl " + strings.ReplaceAll(strings.ReplaceAll(name, "-", " "), "_", "-"), true
}
