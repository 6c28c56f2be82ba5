package cli_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	storagemigrationv1 "k8s.io/api/storagemigration/v1"

	migrationv1alpha1 "github.com/svm-project/svm/api/migration/v1alpha1"
	"github.com/svm-project/svm/test/controlplane"
	"github.com/svm-project/svm/test/docs"
	"github.com/svm-project/svm/test/framework"
)

// TestDocumentedKubectlWait runs the README's `kubectl wait` for svm's
// migrations against a control plane that also serves the in-tree
// storagemigration.k8s.io/v1 StorageVersionMigration, as every Kubernetes
// 1.37+ API server does. An in-tree migration of the same resource is left
// pending (no kube-controller-manager runs here), so a command that
// resolved to the in-tree API would wait until its timeout: the documented
// command must finish on svm's migration instead, and scripts written for
// the reference migrator must read its state where they look for it.
//
// It installs svm's CRDs itself, runs svm's controller and waits on every
// migration, so it has a control plane of its own.
func TestDocumentedKubectlWait(t *testing.T) {
	t.Parallel()
	// No kube-controller-manager (Options.ControllerManager is off), so the
	// in-tree migration created below stays pending for good.
	env := framework.Start(t, controlplane.Options{})
	kubeconfig := env.KubeconfigFile(t)

	if _, err := env.Discovery.ServerResourcesForGroupVersion(storagemigrationv1.SchemeGroupVersion.String()); err != nil {
		t.Fatalf("the server does not serve %s: %v", storagemigrationv1.SchemeGroupVersion, err)
	}
	const inTreeName, svmName = "widgets-in-tree", "widgets-svm"
	env.CreateInTreeMigration(t, inTreeName, framework.Widgets.GroupResource())

	env.InstallCRDs(t, framework.CRDBasesDir())
	env.CreateWidgetCRD(t, "v1")
	env.CreateWidgets(t, "v1", []string{"default"}, 50)
	hash := env.StorageVersionHash(t, framework.Widgets)
	env.SetCRDStorageVersion(t, framework.WidgetsCRDName, "v2")
	env.WaitStorageVersionHashChange(t, framework.Widgets, hash)

	// The migration controller alone, as in test/integration/controller:
	// the trigger would add migrations of its own that `--all` waits on.
	env.StartSVM(t, framework.ControllerArgs("--trigger=false")...)
	env.CreateMigration(t, svmName, framework.Widgets)

	// The command as the README gives it, so that the docs are what is
	// tested.
	wait := documentedWait(t)
	args := slices.Clone(wait.Words[1:])
	if !slices.ContainsFunc(args, func(a string) bool { return a == "--timeout" || strings.HasPrefix(a, "--timeout=") }) {
		args = append(args, "--timeout=3m") // kubectl's default of 30s is no bound for a real migration
	}
	start := time.Now()
	code, stdout, stderr := runKubectl(t, env, kubeconfig, 4*time.Minute, args...)
	t.Logf("README.md:%d `%s` exited %d after %v\nstdout:\n%s\nstderr:\n%s", wait.Line, wait.Text, code, time.Since(start).Round(time.Millisecond), stdout, stderr)
	if code != 0 {
		t.Fatalf("the README's wait command did not succeed")
	}
	if !strings.Contains(stdout, "migration.k8s.io/"+svmName+" condition met") || strings.Contains(stdout, inTreeName) {
		t.Errorf("the README's wait command did not wait on svm's migration %s (and only it):\n%s", svmName, stdout)
	}

	// The plain plural is the in-tree API: it waits on the pending in-tree
	// migration, even now that svm's has succeeded, and times out. This is
	// what the README's command would do without its group.
	code, stdout, stderr = runKubectl(t, env, kubeconfig, time.Minute,
		"wait", "--for=condition=Succeeded", "storageversionmigrations", "--all", "--timeout=5s")
	t.Logf("`kubectl wait --for=condition=Succeeded storageversionmigrations --all --timeout=5s` exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	if code == 0 {
		t.Errorf("`kubectl wait --for=condition=Succeeded storageversionmigrations --all` succeeded; it should resolve to the pending in-tree migration\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
	} else if !strings.Contains(stderr, inTreeName) || strings.Contains(stdout+stderr, svmName) {
		t.Errorf("`kubectl wait ... storageversionmigrations --all` failed, but not by waiting on the in-tree %s alone\nstdout:\n%s\nstderr:\n%s", inTreeName, stdout, stderr)
	}

	// Scripts written for the reference migrator read the state at index 0.
	code, stdout, stderr = runKubectl(t, env, kubeconfig, time.Minute,
		"get", "storageversionmigrations.migration.k8s.io", svmName, "-o", "jsonpath={.status.conditions[0].type}")
	if code != 0 || stdout != string(migrationv1alpha1.MigrationSucceeded) {
		t.Errorf("the reference's jsonpath {.status.conditions[0].type} read %q (exit %d, stderr %q), want %q",
			stdout, code, stderr, migrationv1alpha1.MigrationSucceeded)
	}

	// The README's other names for svm's types: the short names, and the
	// category that lists both and nothing in-tree.
	createStorageState(t, env, framework.Widgets.Group, framework.Widgets.Resource, hash, []string{hash})
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"get", "svmigration", svmName, "-o", "name"}, []string{"storageversionmigration.migration.k8s.io/" + svmName}},
		{[]string{"get", "svmstate", "-o", "name"}, []string{"storagestate.migration.k8s.io/widgets.example.com"}},
		{[]string{"get", "svm", "-o", "name"}, []string{"storageversionmigration.migration.k8s.io/" + svmName, "storagestate.migration.k8s.io/widgets.example.com"}},
	} {
		code, stdout, stderr := runKubectl(t, env, kubeconfig, time.Minute, tc.args...)
		got := strings.Fields(stdout)
		slices.Sort(got)
		slices.Sort(tc.want)
		if code != 0 || !slices.Equal(got, tc.want) {
			t.Errorf("kubectl %s: exit %d, printed %q, want %q\nstderr:\n%s", strings.Join(tc.args, " "), code, got, tc.want, stderr)
		}
	}
}

// documentedWait returns the README's `kubectl wait
// --for=condition=Succeeded` command, or fails the test if it has none.
func documentedWait(t *testing.T) docs.Command {
	t.Helper()
	readme := string(framework.MustReadFile(t, filepath.Join(framework.RepoRoot(), "README.md")))
	for _, c := range docs.Commands(readme) {
		if len(c.Words) > 1 && c.Words[1] == "wait" && slices.Contains(c.Words, "--for=condition=Succeeded") {
			return c
		}
	}
	t.Fatal("README.md gives no `kubectl wait --for=condition=Succeeded ...` command")
	return docs.Command{}
}

// runKubectl runs bin/kubectl against env's API server for at most limit,
// which is longer than any --timeout the arguments give, so that kubectl's
// own verdict is what the test sees. framework's Kubectl helper has a fixed
// bound of two minutes, shorter than the README's wait may take.
func runKubectl(t *testing.T, env *framework.Env, kubeconfig string, limit time.Duration, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	bin := env.CP.BinPath("kubectl")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("kubectl not built: %v (run 'make kubectl')", err)
	}
	ctx := framework.Context(t, limit)
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("kubectl %s did not exit within %v", strings.Join(args, " "), limit)
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("run kubectl: %v", err)
	}
	return code, out.String(), errOut.String()
}
